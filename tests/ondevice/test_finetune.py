"""On-device fine-tuning: 20 steps of `turbotrain.ondevice` (in a process where torch cannot be imported)
give the losses and final weights of the same 20 steps in torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from tests import tiny_models
from tests.ondevice.conftest import LR, NUM_LABELS, TRAINABLE, WEIGHT_DECAY, bert

pytestmark = pytest.mark.requires_onnx

STEPS = 20


def batches(steps: int = STEPS, seed: int = 0):
    """Batches of varying size and length, right-padded, as a dataloader with dynamic padding gives."""
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        size, length = 2 + step % 3, 5 + (7 * step) % 23
        input_ids = torch.randint(3, tiny_models.VOCAB, (size, length), generator=generator)
        lengths = torch.randint(1, length + 1, (size,), generator=generator)
        mask = (torch.arange(length)[None] < lengths[:, None]).long()
        labels = torch.randint(0, NUM_LABELS, (size,), generator=generator)
        yield {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def train_in_torch(model):
    model.train()
    params = {n: p for n, p in model.named_parameters() if TRAINABLE(n)}
    for n, p in model.named_parameters():
        p.requires_grad_(n in params)
    from transformers import Trainer

    decayed = set(Trainer.get_decay_parameter_names(None, model))
    groups = [
        {"params": [p for n, p in params.items() if n in decayed], "weight_decay": WEIGHT_DECAY},
        {"params": [p for n, p in params.items() if n not in decayed], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=LR, foreach=False)
    losses = []
    for batch in batches():
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.detach().numpy() for n, p in params.items()}


ON_DEVICE = textwrap.dedent("""
    import json, sys
    sys.modules["torch"] = None          # torch is not importable in this process
    import numpy as np
    from turbotrain import ondevice
    artifacts, batches_file, out = sys.argv[1:4]
    module = ondevice.Module(artifacts)
    optimizer = ondevice.AdamW(module)
    data = np.load(batches_file)
    losses = []
    for step in range(int(data["steps"])):
        batch = {k: data[f"{k}{step}"] for k in ("input_ids", "attention_mask", "labels")}
        losses.append(module.train_step(batch))
        optimizer.step()
    eval_loss, logits = module.eval_step(batch)
    module.save_checkpoint(out + "/checkpoint.safetensors")
    ondevice.export_model_for_inferencing(module, out + "/inference.onnx")
    assert "torch" not in sys.modules or sys.modules["torch"] is None
    json.dump({"losses": losses, "eval_loss": eval_loss}, open(out + "/result.json", "w"))
""")


def test_twenty_steps_on_device_equal_torch(exported, tmp_path):
    batches_file = tmp_path / "batches.npz"
    arrays = {f"{k}{i}": v.numpy() for i, b in enumerate(batches()) for k, v in b.items()}
    np.savez(batches_file, steps=STEPS, **arrays)
    subprocess.run(
        [sys.executable, "-c", ON_DEVICE, str(exported.directory), str(batches_file), str(tmp_path)], check=True
    )
    result = json.loads((tmp_path / "result.json").read_text())

    expected_losses, expected_params = train_in_torch(bert())
    np.testing.assert_allclose(result["losses"], expected_losses, rtol=1e-4)
    from turbotrain.ondevice import Checkpoint

    trained = Checkpoint.load(tmp_path / "checkpoint.safetensors")
    assert trained.step == STEPS
    assert set(trained.params) == set(expected_params)
    for name, value in expected_params.items():
        # Relative to the tensor's scale: an element that crosses zero has no meaningful relative error.
        difference = np.abs(trained.params[name] - value).max()
        assert difference <= 1e-4 * np.abs(value).max(), (name, difference, np.abs(value).max())
    assert not np.allclose(trained.params["classifier.weight"], bert().classifier.weight.detach().numpy())

    import onnxruntime as ort

    # The inference model carries the trained weights: its logits are the eval graph's.
    last = list(batches())[-1]
    session = ort.InferenceSession(str(tmp_path / "inference.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    logits = session.run(None, {k: last[k].numpy() for k in ("input_ids", "attention_mask")})[0]
    model = bert().eval()
    model.load_state_dict({n: torch.from_numpy(v) for n, v in trained.params.items()}, strict=False)
    with torch.no_grad():
        expected = model(input_ids=last["input_ids"], attention_mask=last["attention_mask"]).logits.numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-5)


def test_importing_ondevice_does_not_import_torch():
    code = "import sys, turbotrain, turbotrain.ondevice; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def first_batch():
    return {k: v.numpy() for k, v in next(iter(batches(1))).items()}


def test_train_steps_accumulate_gradients_until_the_optimizer_steps(exported):
    from turbotrain import ondevice

    module = ondevice.Module(
        exported.directory, ondevice.Checkpoint.load(exported.directory / "checkpoint.safetensors")
    )
    optimizer = ondevice.AdamW(module)
    with pytest.raises(RuntimeError, match="call module.train_step"):
        optimizer.step()
    module.train_step(first_batch())
    once = {n: g.copy() for n, g in module.grads.items()}
    module.train_step(first_batch())
    for name, grad in module.grads.items():
        np.testing.assert_allclose(grad, 2 * once[name], rtol=1e-6)
    optimizer.set_learning_rate(1e-3)
    optimizer.step()
    assert module.grads == {} and module.checkpoint.step == 1 and optimizer.learning_rate == 1e-3


def test_checkpoint_round_trips(exported, tmp_path):
    from turbotrain import ondevice

    state = ondevice.Checkpoint.load(exported.directory / "checkpoint.safetensors")
    state.step, state.learning_rate = 7, 2.5e-4
    state.exp_avg["classifier.bias"] = state.exp_avg["classifier.bias"] + 1
    loaded = ondevice.Checkpoint.load(state.save(tmp_path / "c.safetensors"))
    assert (loaded.step, loaded.learning_rate) == (7, 2.5e-4)
    np.testing.assert_array_equal(loaded.exp_avg["classifier.bias"], state.exp_avg["classifier.bias"])
    assert not (tmp_path / "c.safetensors.partial").exists()


def test_clear_errors_for_bad_batches_and_directories(exported, tmp_path):
    from turbotrain import ondevice

    module = ondevice.Module(
        exported.directory, ondevice.Checkpoint.load(exported.directory / "checkpoint.safetensors")
    )
    batch = first_batch()
    with pytest.raises(KeyError, match="batch lacks 'labels'"):
        module.train_step({k: v for k, v in batch.items() if k != "labels"})
    with pytest.raises(ValueError, match="expected axes"):
        module.eval_step({**batch, "labels": batch["labels"][:, None]})
    with pytest.raises(FileNotFoundError, match="not a turbotrain training-artifacts directory"):
        ondevice.Module(tmp_path)


def test_trainable_selection_refuses_a_pattern_that_matches_nothing():
    from turbotrain.export.training import select_trainable

    with pytest.raises(ValueError, match="no parameter of BertForSequenceClassification matches"):
        select_trainable(bert(), ["decoder."])
    assert select_trainable(bert(), ["classifier."]) == ["classifier.weight", "classifier.bias"]
