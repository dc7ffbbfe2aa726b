"""The kto workload: the dpo workload's pairs unpaired as KTO takes them, TRL's KTOTrainer and turbo's."""

from __future__ import annotations

import json

import pytest

from tests.bench.tiny import SCHEDULE, SIZES
from turbotrain.bench.runner import run_bench
from turbotrain.bench.workloads import make_workload
from turbotrain.bench.workloads.kto import unpaired

pytestmark = pytest.mark.requires_llm
TINY = {**SIZES, **SCHEDULE, "vocab_size": 3000, "pairs": 8, "prompt_tokens": (6, 20), "completion_tokens": (3, 9)}


def test_each_pair_gives_a_desirable_and_an_undesirable_row_of_its_prompt():
    from datasets import Dataset

    pairs = Dataset.from_dict({"prompt": ["p", "q"], "chosen": ["a", "b"], "rejected": ["x", "y"]})
    rows = unpaired(pairs)
    assert rows.to_dict() == {
        "prompt": ["p", "p", "q", "q"],
        "completion": ["a", "x", "b", "y"],
        "label": [True, False, True, False],
    }


def test_kto_peers_are_stock_and_turbo_only():
    assert make_workload("kto").peers == ("stock", "turbo")
    with pytest.raises(ValueError, match="unknown peers"):
        make_workload("kto", peers=("stock", "trl-padding-free"))


@pytest.mark.slow
def test_tiny_kto_bench_gives_stock_losses_for_turbo(tmp_path):
    run_bench(make_workload("kto", **TINY), out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench.json").read_text())
    peers = saved["peers"]
    assert peers["turbo"]["max_rel_loss_diff"] < 1e-5
    assert "label_sparsity" in peers["turbo"]["passes"] and "chunked_cross_entropy" in peers["turbo"]["passes"]
    assert saved["title"].startswith("KTO Qwen2-shaped, full fine-tune")
    assert saved["rows"] == 16 and saved["desirable"] == 8
    assert saved["command"].startswith("turbotrain bench --task kto")


def test_peer_classes_make_a_turbo_peer_of_the_trl_classes_and_leave_stock_as_it_is():
    from trl import KTOConfig, KTOTrainer

    workload = make_workload("kto", **TINY)
    assert workload.peer_classes("stock", KTOConfig, KTOTrainer) == (KTOConfig, KTOTrainer, {})
    config_class, trainer_class, options = workload.peer_classes("turbo:eager", KTOConfig, KTOTrainer)
    assert issubclass(config_class, KTOConfig) and issubclass(trainer_class, KTOTrainer)
    assert config_class is not KTOConfig and trainer_class is not KTOTrainer
    assert "eager" in options.values()  # the peer's backend, by the arguments class's attribute name
