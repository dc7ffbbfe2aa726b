"""A stand-in for liger-kernel on a machine without a GPU (Liger's kernels are Triton's): its per-instance patch
as Liger 0.8.2 makes it for a Llama or a Qwen2 (`apply_liger_kernel_to_llama(model=...)`, its Qwen2 function alike), with torch's arithmetic in place of
its kernels.

What is the same as Liger's, and what the tests rely on: the table `MODEL_TYPE_TO_APPLY_LIGER_FN` of
`liger_kernel.transformers.monkey_patch` and its functions' keywords and defaults (`fused_linear_cross_entropy` and
`swiglu` on); the model's forward replaced on the instance by one that, in training with labels (or
`shift_labels`), hands every position's hidden state and the head's weight to the fused loss and never calls the
head module; each MLP's forward bound on its instance. Not Liger's: the kernels (a float32 linear and
cross-entropy; act(gate) * up), so the losses are stock's to float rounding.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import sys
import types

import torch.nn.functional as F
from transformers.modeling_outputs import CausalLMOutputWithPast

IGNORE_INDEX = -100


def lce_forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None, **kwargs):
    """Liger's `lce_forward`: the body, then in training the fused loss over every position."""
    shift_labels = kwargs.pop("shift_labels", None)
    items = kwargs.pop("num_items_in_batch", None)
    hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)[0]
    if self.training and (labels is not None or shift_labels is not None):
        if shift_labels is None:
            shift_labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
        flat = hidden.reshape(-1, hidden.shape[-1]).float()  # every position: the fused loss sees them all
        logits = F.linear(flat, self.lm_head.weight.float())
        targets = shift_labels.reshape(-1)
        if items is None:
            loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
        else:
            loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum") / items
        return CausalLMOutputWithPast(loss=loss)
    logits = self.lm_head(hidden)
    loss = None if labels is None else self.loss_function(logits, labels, self.config.vocab_size)
    return CausalLMOutputWithPast(loss=loss, logits=logits)


def swiglu_forward(self, x):
    return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


CALLS: list[dict] = []  # each patch's keywords, as the apply function received them


def apply_liger_kernel_to_llama(rope=True, cross_entropy=False, fused_linear_cross_entropy=True, rms_norm=True,
                                swiglu=True, model=None):  # fmt: skip
    CALLS.append(dict(fused_linear_cross_entropy=fused_linear_cross_entropy, swiglu=swiglu))
    if fused_linear_cross_entropy:
        model.forward = types.MethodType(lce_forward, model)
    for layer in getattr(model, model.base_model_prefix, model).layers:
        if swiglu:
            layer.mlp.__dict__["forward"] = swiglu_forward.__get__(layer.mlp, type(layer.mlp))


def _apply_liger_kernel_to_instance(model, **kwargs):
    apply = MODEL_TYPE_TO_APPLY_LIGER_FN.get(getattr(model.config, "model_type", None))
    if apply is not None:  # as Liger: only the keywords the function takes
        taken = inspect.signature(apply).parameters
        apply(model=model, **{key: value for key, value in kwargs.items() if key in taken})


for _function in (lce_forward, swiglu_forward):  # where Liger's live: what liger_boundary.already_replaced reads
    _function.__module__ = "liger_kernel.transformers.model.llama"


MODEL_TYPE_TO_APPLY_LIGER_FN = {"llama": apply_liger_kernel_to_llama, "qwen2": apply_liger_kernel_to_llama}  # alike


def install(monkeypatch) -> list[dict]:
    """Make `liger_kernel` importable as this stand-in for the test, and Transformers take it as installed; the
    list of patch calls is returned (empty until a Trainer's train() applies it)."""
    CALLS.clear()
    package = types.ModuleType("liger_kernel")
    package.__spec__ = importlib.machinery.ModuleSpec("liger_kernel", None, is_package=True)
    package.__path__ = []
    transformers_part = types.ModuleType("liger_kernel.transformers")
    transformers_part._apply_liger_kernel_to_instance = _apply_liger_kernel_to_instance
    monkey_patch = types.ModuleType("liger_kernel.transformers.monkey_patch")
    monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN = MODEL_TYPE_TO_APPLY_LIGER_FN
    transformers_part.monkey_patch = monkey_patch
    package.transformers = transformers_part
    for name, module in [("liger_kernel", package), ("liger_kernel.transformers", transformers_part),
                         ("liger_kernel.transformers.monkey_patch", monkey_patch)]:  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    import transformers.trainer as hf_trainer

    try:  # Transformers >= 5.x applies it through its integration module, 5.0 in Trainer.__init__
        import transformers.integrations.liger as hf_liger

        monkeypatch.setattr(hf_liger, "is_liger_kernel_available", lambda: True)
    except ImportError:
        pass
    monkeypatch.setattr(hf_trainer, "is_liger_kernel_available", lambda: True, raising=False)
    return CALLS
