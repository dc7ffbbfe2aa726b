"""The Transformers boundary: the private names turbotrain relies on exist with the signatures it calls,
and no module but `turbotrain/hf_boundary.py` uses a private Transformers name."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers
from transformers import Trainer

from turbotrain.boundaries import hf_boundary

PACKAGE = Path(hf_boundary.__file__).parent
BOUNDARY = Path(hf_boundary.__file__)

# parameter names (self first) of every private Trainer method the boundary calls or overrides
TRAINER_SIGNATURES = {
    "_get_train_sampler": ("self", "train_dataset"),
    "_get_num_items_in_batch": ("self", "batch_samples", "device"),
    "_inner_training_loop": ("self", "batch_size", "args", "resume_from_checkpoint", "trial", "ignore_keys_for_eval"),
    "_save_checkpoint": ("self", "model", "trial"),
    "_get_output_dir": ("self", "trial"),
    "_get_learning_rate": ("self",),
    "_maybe_log_save_evaluate": (
        "self",
        "tr_loss",
        "grad_norm",
        "model",
        "trial",
        "epoch",
        "ignore_keys_for_eval",
        "start_time",
        "learning_rate",
    ),
    "get_decay_parameter_names": ("self", "model"),
    "get_batch_samples": ("self", "epoch_iterator", "num_batches", "device"),
}
# the parts a backend with its own loop reuses (xla); Transformers 5.3 and later
LOOP_SIGNATURES = {
    "_init_training_state": (
        "self",
        "max_steps",
        "num_update_steps_per_epoch",
        "num_train_epochs",
        "resume_from_checkpoint",
        "trial",
    ),
    "_prepare_for_training": ("self", "max_steps", "train_dataloader", "resume_from_checkpoint"),
    "_finalize_training": ("self", "trial", "num_train_samples", "start_time"),
    "_track_num_input_tokens": ("self", "inputs"),
    "set_initial_training_values": ("self", "args", "dataloader"),
}
# attributes of a Trainer the boundary reads or sets, as Trainer's own loop does (5.3 and later)
TRAINER_ATTRIBUTES = (
    "_train_batch_size",
    "_tr_loss",
    "_total_loss_scalar",
    "_globalstep_last_logged",
    "_initial_global_step",
    "_initial_num_input_tokens_seen",
)
# Transformers source files whose private names count as Transformers' private names
TRANSFORMERS_SOURCES = (
    "trainer.py",
    "training_args.py",
    "trainer_utils.py",
    "trainer_pt_utils.py",
    "modeling_utils.py",
    "configuration_utils.py",
    "tokenization_utils_base.py",
    "masking_utils.py",
    "trainer_callback.py",
)


def parameters(function) -> tuple[str, ...]:
    return tuple(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", sorted(TRAINER_SIGNATURES))
def test_trainer_private_method_signature_is_pinned(name):
    assert parameters(getattr(Trainer, name)) == TRAINER_SIGNATURES[name]


@pytest.mark.parametrize("name", sorted(LOOP_SIGNATURES))
def test_loop_part_signature_is_pinned(name):
    if hf_boundary.missing_loop_parts():
        pytest.skip(f"transformers {transformers.__version__} lacks {hf_boundary.missing_loop_parts()}: xla refuses")
    assert parameters(getattr(Trainer, name)) == LOOP_SIGNATURES[name]


def test_the_xla_backend_is_refused_where_loop_parts_are_missing(monkeypatch):
    monkeypatch.delattr(Trainer, "_init_training_state", raising=False)
    assert "_init_training_state" in hf_boundary.missing_loop_parts()


@pytest.mark.parametrize("name", TRAINER_ATTRIBUTES)
def test_trainer_attribute_is_still_set_by_trainer(name):
    if hf_boundary.missing_loop_parts():
        pytest.skip(f"transformers {transformers.__version__}: only the xla loop uses these, and xla refuses")
    assert f"self.{name} = " in inspect.getsource(Trainer) or f"self.{name}=" in inspect.getsource(Trainer)


def test_attention_implementation_is_read_from_the_config():
    from transformers import BertConfig, BertModel

    model = BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100),
        add_pooling_layer=False,
    )
    assert hf_boundary.attention_implementation(model.config) in {"sdpa", "eager"}


def transformers_private_names() -> set[str]:
    root = Path(transformers.__file__).parent
    names: set[str] = set()
    for source in TRANSFORMERS_SOURCES:
        path = root / source
        if path.exists():
            text = path.read_text()
            names |= set(re.findall(r"\b(?:self|cls|config|model|trainer)\.(_[a-z]\w*)", text))
            names |= set(re.findall(r"^\s*def (_[a-z]\w*)\(", text, re.MULTILINE))
    return names


def private_uses(path: Path) -> dict[str, int]:
    """Private (single-underscore) attribute names used or defined in a module, with a line of each."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.setdefault(alias.name, node.lineno)
        if name and name.startswith("_") and not name.startswith("__"):
            found.setdefault(name, node.lineno)
    return found


def test_no_private_transformers_name_outside_the_boundary():
    private = transformers_private_names()
    assert "_inner_training_loop" in private and "_attn_implementation" in private  # the scan sees them
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == BOUNDARY:
            continue
        for name, line in private_uses(path).items():
            if name in private:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} uses {name}")
    assert not offenders, "private Transformers names belong in turbotrain/hf_boundary.py:\n" + "\n".join(offenders)


def test_the_scan_would_catch_a_private_use(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f(trainer):\n    return trainer._get_output_dir(None)\n")
    assert "_get_output_dir" in set(private_uses(sneaky)) & transformers_private_names()


def test_the_sharding_engine_is_named():
    fsdp2 = SimpleNamespace(
        is_fsdp_enabled=True,
        accelerator=SimpleNamespace(state=SimpleNamespace(fsdp_plugin=SimpleNamespace(fsdp_version=2))),
    )
    assert hf_boundary.sharding_engine(fsdp2) == "FSDP2"
    assert hf_boundary.sharding_engine(SimpleNamespace(is_fsdp_enabled=True)) == "FSDP"
    assert hf_boundary.sharding_engine(SimpleNamespace(is_fsdp_enabled=False, is_deepspeed_enabled=False)) is None
