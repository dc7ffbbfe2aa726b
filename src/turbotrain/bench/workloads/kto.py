"""`--task kto`: TRL's `KTOTrainer` on unpaired desirable / undesirable completions, reference model on.

Model, shapes, LoRA and lengths as the dpo workload's (bench/workloads/dpo.py: `small` is a Qwen2 layout, hidden
256, 4 layers; `--vocab-size 151936` the Qwen2-shaped vocabulary). Data: the dpo workload's preference pairs
(data/preference.py) unpaired as KTO takes them: each pair gives two rows, the prompt with its chosen completion
(`label` True) and with its rejected one (`label` False), so a step's batch mixes both. KTOTrainer adds its KL
rows (each prompt with another row's completion, scored under `no_grad` by the policy and the reference), so a
step scores three batches of rows with the policy (one with gradient) and two with the reference.

Peers, built as a user writes them, same weights and rows: `stock`: `KTOTrainer` with `KTOConfig` (beta 0.1,
TRL's `loss_type` "kto", `gradient_checkpointing=False`, fp32 unless `--bf16`); `turbo`: `turbo(KTOTrainer)`
with `turbo_arguments(KTOConfig)`. What turbotrain changes: TRL's fused-head calls answered by the per-row
chunked op on the completion rows (passes/fused_head_calls.py, integrations/trl/: KTO's row). Timing, losses and
memory as every Trainer workload's (bench/peers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datasets import Dataset

from turbotrain.bench.peers import TrainerPeer
from turbotrain.bench.workload import register_workload
from turbotrain.bench.workloads.dpo import Dpo, DpoData
from turbotrain.integrations.trl import classes

BETA = 0.1


def unpaired(pairs: Dataset) -> Dataset:
    """KTO's rows from preference pairs: (prompt, chosen, True) and (prompt, rejected, False), pair by pair."""
    prompts, completions, labels = [], [], []
    for prompt, chosen, rejected in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"]):
        prompts += [prompt, prompt]
        completions += [chosen, rejected]
        labels += [True, False]
    return Dataset.from_dict({"prompt": prompts, "completion": completions, "label": labels})


@register_workload("kto")
@dataclass
class Kto(Dpo):
    peers: tuple[str, ...] = field(default=("stock", "turbo"), metadata={"help": "stock turbo"})
    batch_size: int = field(default=8, metadata={"help": "rows per step (half desirable, half undesirable)"})

    own_peers = ()

    def data(self) -> DpoData:
        pairs = super().data()
        return DpoData(pairs=unpaired(pairs.pairs), tokenizer=pairs.tokenizer)

    def trainer(self, peer: str, model, data: DpoData, counter, output_dir: str) -> TrainerPeer:
        trl_classes = classes("KTO", f"the kto workload's '{peer}' peer")
        config_class, trainer_class, options = self.peer_classes(peer, *trl_classes)
        args = config_class(
            **self.common_arguments(output_dir), **options, beta=BETA, max_length=None, gradient_checkpointing=False
        )
        trainer = self.preference_trainer(trainer_class, args, model, data)
        trainer.data_collator = counter.wrap(trainer.data_collator)  # TRL's own collator, counted
        return TrainerPeer(trainer, counter)

    def title(self) -> str:
        return super().title().replace("DPO", "KTO", 1).replace(" pairs", " rows (from pairs)")

    def extras(self, model, data: DpoData) -> dict:
        rows = data.pairs
        return {"rows": len(rows), "desirable": sum(rows["label"])}
