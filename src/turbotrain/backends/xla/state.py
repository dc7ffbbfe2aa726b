"""The xla backend's training state, and its conversion from and back to torch.

`TrainState` is what the compiled step carries and donates: the trainable parameters and the optimizer
state. Frozen parameters and buffers travel separately, as constants. Names are the model's
`named_parameters()` names, where a tied weight appears once (GPT-2's `lm_head.weight` is
`transformer.wte.weight`); `torch.func.functional_call` ties it back inside the step, so the jax copy
has exactly the torch model's parameter count and the tied weight gets one summed gradient (moving
a model's tensors to jax one by one, `.to("jax")`, would untie them; tests check the count and the tie).

Back to torch (`write_back`): weights are copied into the torch model, and the AdamW moments into the
torch optimizer's state (`step`, `exp_avg`, `exp_avg_sq`), so Trainer's checkpoints are ordinary torch
checkpoints that any backend can resume, and `from_torch` reads them back on resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    import jax

    from turbotrain.backends.xla.optimizer import TorchAdamWState


class TrainState(NamedTuple):
    params: dict
    opt_state: TorchAdamWState


def split_parameters(model: nn.Module) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(trainable, frozen + buffers) of `model` as host arrays, each tied weight once."""
    trainable, frozen = {}, {}
    for name, param in model.named_parameters():
        (trainable if param.requires_grad else frozen)[name] = host_array(param)
    for name, buffer in model.named_buffers():
        frozen[name] = host_array(buffer)
    return trainable, frozen


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array for jax: int64 becomes int32 (jax runs without 64-bit types by default)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.int64:
        tensor = tensor.to(torch.int32)
    return tensor.numpy()


def torch_moments(model: nn.Module, optimizer, names: list[str]) -> tuple[int, dict, dict] | None:
    """(step, exp_avg, exp_avg_sq) from a torch AdamW's state for `names`, or None if it has none yet."""
    if optimizer is None:
        return None
    params = dict(model.named_parameters())
    states = [optimizer.state.get(params[name]) for name in names]
    if not any(states):
        return None
    if not all(states):
        raise RuntimeError("turbotrain xla: the optimizer state covers only some parameters; cannot resume from it")
    steps = {int(state["step"]) for state in states}
    if len(steps) != 1:
        raise RuntimeError(f"turbotrain xla: AdamW state has different step counts {sorted(steps)}")
    mu = {name: host_array(state["exp_avg"]) for name, state in zip(names, states)}
    nu = {name: host_array(state["exp_avg_sq"]) for name, state in zip(names, states)}
    return steps.pop(), mu, nu


def to_torch(array: jax.Array) -> torch.Tensor:
    return torch.from_numpy(np.array(array))


def write_back(model: nn.Module, optimizer, params: dict, count, mu: dict, nu: dict) -> None:
    """Copy weights into `model` and the AdamW moments into `optimizer` (torch's layout)."""
    named = dict(model.named_parameters())
    step = torch.tensor(float(count), dtype=torch.float32)
    with torch.no_grad():
        for name, value in params.items():
            param = named[name]
            param.copy_(to_torch(value).to(param.dtype))
            if optimizer is not None:
                optimizer.state[param] = {
                    "step": step.clone(),
                    "exp_avg": to_torch(mu[name]).to(param.device),
                    "exp_avg_sq": to_torch(nu[name]).to(param.device),
                }
