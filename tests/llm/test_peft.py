"""PEFT LoRA through TurboTrainer: every pass applies, 10 steps match stock Trainer, adapters save, load
and merge as stock's."""

from __future__ import annotations

import pytest
import torch

from tests.llm.helpers import decoder, lora_config
from tests.tiny_models import VOCAB
from tests.trainer_helpers import (
    RightPaddingCollator,
    assert_losses_close,
    stock_trainer,
    train_losses,
    turbo_trainer,
    variable_length_dataset,
)

pytestmark = pytest.mark.requires_llm


def peft_model(modules_to_save):
    from peft import get_peft_model

    return get_peft_model(decoder(tied=False, vocab=VOCAB), lora_config(modules_to_save))


@pytest.mark.parametrize("modules_to_save", [None, ["lm_head"]])
def test_lora_golden_losses_and_adapters_match_stock(tmp_path, modules_to_save):
    from peft import PeftModel

    data = variable_length_dataset(n=40, max_len=30)
    common = dict(train_dataset=data, learning_rate=5e-3)
    stock = stock_trainer("llama", tmp_path, model=peft_model(modules_to_save), **common)
    stock.data_collator = RightPaddingCollator()
    turbo = turbo_trainer(
        "llama", tmp_path, model=peft_model(modules_to_save), chunked_cross_entropy="always", **common
    )
    turbo.data_collator = RightPaddingCollator()
    assert set(turbo.turbo_report.applied) >= {"label_sparsity", "chunked_cross_entropy", "padding_free"}, (
        turbo.turbo_report
    )
    assert_losses_close(train_losses(turbo), train_losses(stock))

    for trainer in (stock, turbo):
        trainer.model.save_pretrained(tmp_path / type(trainer).__name__)
    assert sorted(p.name for p in (tmp_path / "TurboTrainer").iterdir()) == sorted(
        p.name for p in (tmp_path / "Trainer").iterdir()
    )
    loaded = PeftModel.from_pretrained(decoder(tied=False, vocab=VOCAB), tmp_path / "TurboTrainer").eval()
    inputs = torch.tensor([[5, 9, 14, 3, 27]])
    turbo.model.eval()
    torch.testing.assert_close(loaded(input_ids=inputs).logits, turbo.model(input_ids=inputs).logits)

    merged_stock, merged_turbo = stock.model.merge_and_unload(), turbo.model.merge_and_unload()
    stock_weights = merged_stock.state_dict()
    for name, weight in merged_turbo.state_dict().items():
        torch.testing.assert_close(weight, stock_weights[name], rtol=1e-4, atol=1e-6, msg=name)


def test_embeddings_and_head_in_modules_to_save_get_every_pass_with_stock_gradients():
    import copy

    from tests.parity import assert_same_relative_to_scale as assert_same
    from tests.parity import loss_and_grads
    from turbotrain import optimize
    from turbotrain.modeling import synthetic_batch

    stock = peft_model(["embed_tokens", "lm_head"])
    turbo = copy.deepcopy(stock)
    report = optimize(turbo, chunked_cross_entropy="always")
    assert report.applied == [
        "label_sparsity",
        "chunked_cross_entropy",
        "padding_free",
        "embedding_grad",
        "fused_lora",
        "lean_gated_mlp",
    ], report.skipped
    inputs = synthetic_batch(stock, [9, 6, 3], seed=2, ignore_every=3)
    assert_same(loss_and_grads(stock, inputs), loss_and_grads(turbo, inputs))
