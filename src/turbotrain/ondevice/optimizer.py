"""AdamW for on-device training: one run of the exported optimizer graph updates every trainable tensor.

`step()` applies the gradients that `Module.train_step` accumulated, then clears them (like
`optimizer.step(); optimizer.zero_grad()` in torch). The learning rate is an input of the graph:
`set_learning_rate` changes it for the next steps (a schedule is a loop around it).
"""

from __future__ import annotations

import numpy as np

from turbotrain.ondevice import manifest as layout
from turbotrain.ondevice.module import DEFAULT_PROVIDERS, Module, _session


class AdamW:
    def __init__(self, module: Module, providers=DEFAULT_PROVIDERS, session_options=None):
        self.module = module
        self._session = _session(module.directory / layout.OPTIMIZER_GRAPH, providers, session_options)

    @property
    def learning_rate(self) -> float:
        return self.module.checkpoint.learning_rate

    def set_learning_rate(self, learning_rate: float) -> None:
        self.module.checkpoint.learning_rate = float(learning_rate)

    def step(self) -> None:
        module, state = self.module, self.module.checkpoint
        names = module.manifest.trainable
        if not module.grads:
            raise RuntimeError("no gradients: call module.train_step(batch) before optimizer.step()")
        state.step += 1
        feeds = {"learning_rate": np.array(state.learning_rate, np.float32), "step": np.array(state.step, np.float32)}
        for name in names:
            feeds[name] = state.params[name]
            feeds[layout.GRAD_PREFIX + name] = module.grads[name]
            feeds[f"exp_avg.{name}"] = state.exp_avg[name]
            feeds[f"exp_avg_sq.{name}"] = state.exp_avg_sq[name]
        outputs = self._session.run(None, feeds)
        n = len(names)
        for i, name in enumerate(names):
            state.params[name] = outputs[i]
            state.exp_avg[name] = outputs[n + i]
            state.exp_avg_sq[name] = outputs[2 * n + i]
        module.zero_grad()
