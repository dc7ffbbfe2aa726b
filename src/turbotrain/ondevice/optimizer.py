"""AdamW for on-device training: one run of the exported optimizer graph updates every trainable tensor.

`step()` applies the gradients that `Module.train_step` accumulated, then clears them (like
`optimizer.step(); optimizer.zero_grad()` in torch). The learning rate is an input of the graph:
`set_learning_rate` changes it for the next steps (a schedule is a loop around it); a learning rate
that is not finite or negative is refused, and a step whose result is not finite is not applied
(FloatingPointError, weights and state unchanged).
"""

from __future__ import annotations

import math

import numpy as np

from turbotrain.ondevice import manifest as layout
from turbotrain.ondevice.module import DEFAULT_PROVIDERS, Module, _session


def check_learning_rate(learning_rate: float) -> float:
    """A learning rate the update can use: finite and >= 0 (NaN or inf would turn every weight into NaN)."""
    value = float(learning_rate)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"learning rate must be a finite number >= 0, got {learning_rate!r}")
    return value


class AdamW:
    def __init__(self, module: Module, providers=DEFAULT_PROVIDERS, session_options=None):
        self.module = module
        self._session = _session(module.directory / layout.OPTIMIZER_GRAPH, providers, session_options)

    @property
    def learning_rate(self) -> float:
        return self.module.checkpoint.learning_rate

    def set_learning_rate(self, learning_rate: float) -> None:
        self.module.checkpoint.learning_rate = check_learning_rate(learning_rate)

    def step(self) -> None:
        module, state = self.module, self.module.checkpoint
        names = module.manifest.trainable
        if not module.grads:
            raise RuntimeError("no gradients: call module.train_step(batch) before optimizer.step()")
        check_learning_rate(state.learning_rate)
        feeds = {
            "learning_rate": np.array(state.learning_rate, np.float32),
            "step": np.array(state.step + 1, np.float32),
        }
        for name in names:
            feeds[name] = state.params[name]
            feeds[layout.GRAD_PREFIX + name] = module.grads[name]
            feeds[f"exp_avg.{name}"] = state.exp_avg[name]
            feeds[f"exp_avg_sq.{name}"] = state.exp_avg_sq[name]
        outputs = self._session.run(None, feeds)
        n = len(names)
        for name, value in zip(names, outputs[:n]):
            if not np.isfinite(value).all():
                raise FloatingPointError(
                    f"this step would make {name} NaN or inf (non-finite gradients or loss); "
                    "it was not applied: the weights and optimizer state are unchanged"
                )
        state.step += 1
        for i, name in enumerate(names):
            state.params[name] = outputs[i]
            state.exp_avg[name] = outputs[n + i]
            state.exp_avg_sq[name] = outputs[2 * n + i]
        module.zero_grad()
