"""host_data.py: on H hosts each host's dataloader gives its own rows of every global batch, and the hosts'
rows together are one host's batch, sample for sample, epoch after epoch (Trainer's seeded sampler)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer_helpers import RightPaddingCollator, variable_length_dataset
from turbotrain.boundaries import hf_boundary

pytestmark = pytest.mark.requires_xla

from transformers import Trainer, TrainingArguments  # noqa: E402

from tests.tiny_models import make  # noqa: E402


def dataloader(tmp_path, rows: int):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", seed=3, dataloader_num_workers=0)
    trainer = Trainer(
        model=make("gpt2", dropout=False),
        args=args,
        train_dataset=variable_length_dataset(n=40, max_len=12),
        data_collator=RightPaddingCollator(0),
    )
    hf_boundary.set_train_batch_size(trainer, rows)
    return trainer.get_train_dataloader()


def epoch(loader, number: int) -> list[torch.Tensor]:
    loader.set_epoch(number)
    return [batch["input_ids"] for batch in loader]


def pad(ids: torch.Tensor, length: int) -> torch.Tensor:
    return torch.nn.functional.pad(ids, (0, length - ids.shape[1]))


@pytest.mark.parametrize("hosts", [2, 4])
def test_the_hosts_rows_together_are_one_hosts_batches(tmp_path, hosts):
    from turbotrain.backends.xla.host_data import host_dataloader
    from turbotrain.backends.xla.hosts import Hosts

    one = dataloader(tmp_path / "one", 8)
    shards = [
        host_dataloader(dataloader(tmp_path / f"host{h}", 8 // hosts), Hosts(hosts, h), h, trainer_is_distributed=False)
        for h in range(hosts)
    ]
    assert all(len(shard) == len(one) for shard in shards)
    for number in (0, 1):
        expected = epoch(one, number)
        per_host = [epoch(shard, number) for shard in shards]
        for step, batch in enumerate(expected):
            parts = [rows[step] for rows in per_host]
            assert all(part.shape[0] == 8 // hosts for part in parts)  # each host read only its rows
            length = max(part.shape[1] for part in parts)
            torch.testing.assert_close(torch.cat([pad(part, length) for part in parts]), pad(batch, length))


def test_one_host_and_torchrun_keep_trainers_dataloader(tmp_path):
    from turbotrain.backends.xla.host_data import host_dataloader
    from turbotrain.backends.xla.hosts import Hosts

    loader = dataloader(tmp_path, 8)
    assert host_dataloader(loader, Hosts(), 0, trainer_is_distributed=False) is loader
    assert host_dataloader(loader, Hosts(2, 1), 1, trainer_is_distributed=True) is loader
