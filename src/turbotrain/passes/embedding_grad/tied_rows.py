"""An input embedding's gradient rows added in place into its tied weight's dense gradient.

A weight shared by the input embedding and the output head (Gemma, Qwen2.5 small models, masked-LM decoders)
gets a dense [V, H] gradient from the head. Handed the embedding's few hundred rows as a sparse gradient
beside it, autograd sums the two out of place: a fresh [V, H] copy every backward (measured ~1 s a step at
Gemma-3's 262,144 x 640 on a 2-core CPU, where the rows themselves take well under a millisecond).
`TiedRows` keeps the rows instead, the embedding's backward returns no gradient for the weight, and a
post-accumulate-grad hook on the weight adds them, `index_add_`, into `weight.grad` once autograd has put
the head's part there. The sums are stock's (float order of the additions only).

When: only in a `.backward()` that accumulates into the module's own parameter (`accepts(weight)`): not
under `torch.autograd.grad` (leaves are captured there, never accumulated) nor for a weight substituted by
`torch.func.functional_call`; there the embedding returns its rows as a sparse gradient, as before.
Order: the hook is registered on the weight when the pass is installed (or at the first forward taking a
gradient, for a weight frozen then), so hooks registered later on the weight (an optimizer stepping in the
backward) see the whole gradient, and DDP's reducer, a hook on the accumulation node, runs after it. Where
the head gave no gradient in a backward, the hook starts from zeros. Rows the accumulation did not take are
added when the backward ends; rows left by a backward that raised are dropped by the next one.
"""

from __future__ import annotations

import torch

from turbotrain.boundaries import torch_boundary


class TiedRows:
    def __init__(self):
        self._kept: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._task = None  # the backward the kept rows belong to
        self._weight: torch.Tensor | None = None
        self._accumulator = None
        self._hook = None

    def watch(self, weight: torch.Tensor) -> None:
        """Hook `weight` (the module's own parameter, a leaf needing a gradient), once."""
        if weight is self._weight or not (weight.is_leaf and weight.requires_grad):
            return
        self.release()
        with torch.enable_grad():
            self._accumulator = weight.view_as(weight).grad_fn.next_functions[0][0]
        self._hook = weight.register_post_accumulate_grad_hook(self._add)
        self._weight = weight

    def accepts(self, weight: torch.Tensor) -> bool:
        """Whether this backward will accumulate into `weight`, the watched one (so the hook will run)."""
        return weight is self._weight and torch_boundary.will_accumulate(self._accumulator)

    def keep(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        task = torch_boundary.backward_task_id()
        if task != self._task:  # the first rows of this backward; any kept earlier belong to one that raised
            self._kept.clear()
            self._task = task
            torch_boundary.at_backward_end(self._add_leftover)
        self._kept.append((rows, values))

    def _add(self, weight: torch.Tensor) -> None:
        if self._kept and weight.grad is None:  # the head gave no gradient this backward
            weight.grad = torch.zeros_like(weight)
        for rows, values in self._kept:
            weight.grad.index_add_(0, rows, values)
        self._kept.clear()

    def _add_leftover(self) -> None:
        self._task = None
        if self._kept and self._weight is not None:
            self._add(self._weight)

    def release(self) -> None:
        if self._hook is not None:
            self._hook.remove()
        self._kept.clear()
        self._weight = self._accumulator = self._hook = None

    def __deepcopy__(self, memo: dict) -> TiedRows:
        return TiedRows()  # a copied model's weight is a new tensor: it is watched at its first forward
