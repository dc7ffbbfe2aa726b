"""torch's AdamW step as a module, exported as the on-device optimizer graph.

Same arithmetic as `torch.optim.AdamW` (single-tensor path), per parameter:
    param    <- param * (1 - lr * weight_decay)
    exp_avg  <- exp_avg + (grad - exp_avg) * (1 - beta1)
    exp_avg_sq <- exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    param    <- param - lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
`step` counts from 1 (the step being taken); learning rate and step are graph inputs so a schedule
can change them without re-exporting. Betas, eps and each parameter's weight decay are constants.
"""

from __future__ import annotations

import torch

from turbotrain.ondevice.manifest import GRAD_PREFIX, OptimizerSpec


class AdamWStep(torch.nn.Module):
    def __init__(self, names: list[str], spec: OptimizerSpec):
        super().__init__()
        self.names = names
        self.spec = spec

    def forward(self, learning_rate, step, *state):
        n = len(self.names)
        params, grads, exp_avgs, exp_avg_sqs = (state[i * n : (i + 1) * n] for i in range(4))
        beta1, beta2 = self.spec.betas
        bias_correction1 = 1 - beta1**step
        bias_correction2_sqrt = torch.sqrt(1 - beta2**step)
        step_size = learning_rate / bias_correction1
        new_params, new_avgs, new_sqs = [], [], []
        for name, param, grad, exp_avg, exp_avg_sq in zip(self.names, params, grads, exp_avgs, exp_avg_sqs):
            param = param * (1 - learning_rate * self.spec.weight_decay.get(name, 0.0))
            exp_avg = exp_avg + (grad - exp_avg) * (1 - beta1)
            exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
            denom = torch.sqrt(exp_avg_sq) / bias_correction2_sqrt + self.spec.eps
            new_params.append(param - step_size * exp_avg / denom)
            new_avgs.append(exp_avg)
            new_sqs.append(exp_avg_sq)
        return (*new_params, *new_avgs, *new_sqs)


def optimizer_io_names(names: list[str]) -> tuple[list[str], list[str]]:
    """Input and output names of the optimizer graph."""
    inputs = [
        "learning_rate",
        "step",
        *names,
        *(GRAD_PREFIX + n for n in names),
        *(f"exp_avg.{n}" for n in names),
        *(f"exp_avg_sq.{n}" for n in names),
    ]
    outputs = [
        *(f"new.{n}" for n in names),
        *(f"new_exp_avg.{n}" for n in names),
        *(f"new_exp_avg_sq.{n}" for n in names),
    ]
    return inputs, outputs
