"""Import `torchax` on torch versions newer than it knows, through a small version-gated shim.

torchax 0.0.13 lists ATen overloads that take named dimensions (`aten.prod.dim_Dimname`,
`aten.index_fill.Dimname_Scalar`, `aten.std.names_dim`, ... 22 in all) in its autocast policy table and its
decomposition list, and torch 2.13 removed those overloads, so `import torchax` raises
AttributeError at import time. torchax never executes them (torch cannot produce them any more); they
are only dictionary keys and list entries there.

The shim applies only when torch lacks `aten.prod.dim_Dimname` (the first one torchax touches) and
only while torchax and the op tables it loads lazily (`TORCHAX_MODULES`) are imported: a missing overload whose name mentions a named dimension
resolves to an inert placeholder that no op ever equals. Any other missing overload still raises, so
a real incompatibility is not hidden. Once torchax stops naming these overloads the shim is inert.

A second repair, also gated on the failure itself: torchax registers itself as torch's PrivateUse1
device ("jax") with a device module whose `is_available()` is True, but registers no C++ hooks, so
`torch.accelerator.is_available()` turns True for the whole process and every later
`DataLoader(pin_memory=True)` (Trainer's default) raises "Please register PrivateUse1HooksInterface".
When pinning a tensor fails that way after the import, the "jax" device module reports itself
unavailable; torch then treats the process as accelerator-less again, as it is (the jax arrays
torchax computes on are not reached through torch's device registry). On a CUDA machine torch 2.11 picks
the registered PrivateUse1 device over CUDA as "the" accelerator, so the same failure reaches stock code
there too (every later Trainer in the process, seen on an H200): the check runs there as well, and the
DataLoader then skips pinning (a cost of the xla backend beside CUDA, not of a CUDA run without it).

A third repair, for bf16 autocast (`bf16=True`): torchax 0.0.13's PROMOTE policy (`aten.cat`, `stack`,
`index_copy`) reads `.dtype` from every positional argument, so a list of tensors (`torch.cat([a, b])`,
as in rotary embeddings and the KV cache) or an int dimension raises AttributeError, and it would
count integer index tensors when picking the widest dtype. `promote_floats` replaces that branch with
torch's rule (floating tensors, wherever they sit in the arguments, cast to the widest floating dtype
among them); the other policies are torchax's own.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import torch

from turbotrain.boundaries.torch_boundary import OpOverloadPacket, tree_leaves, tree_map_only

# torchax imports its op tables when its first Environment is made; the shim imports them up front
TORCHAX_MODULES = (
    "torchax",
    "torchax.ops.jaten",
    "torchax.ops.jc10d",
    "torchax.ops.jtorch",
    "torchax.ops.jtorchvision_nms",
    "torchax.decompositions",
)


class RemovedOverload:
    """Stands for an ATen overload torch no longer has; hashable, equal only to itself."""

    def __init__(self, qualified_name: str):
        self.qualified_name = qualified_name

    def __repr__(self) -> str:
        return f"RemovedOverload({self.qualified_name})"


def needs_shim() -> bool:
    return not hasattr(torch.ops.aten.prod, "dim_Dimname")


def _is_named_dimension_overload(key: str) -> bool:
    """ATen spells named-dimension overloads with `Dimname`/`dimname` or `names` (`std.names_dim`)."""
    return "dimname" in key.lower() or "names" in key.split("_")


@contextlib.contextmanager
def named_dimension_overloads_tolerated():
    original = OpOverloadPacket.__getattr__

    def getattr_or_placeholder(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if not _is_named_dimension_overload(key):
                raise
            return RemovedOverload(f"{self._qualified_op_name}.{key}")

    OpOverloadPacket.__getattr__ = getattr_or_placeholder
    try:
        yield
    finally:
        OpOverloadPacket.__getattr__ = original


def import_torchax():
    """`import torchax`, with the shims this torch needs. Returns the module."""
    if "torchax" in sys.modules:
        return sys.modules["torchax"]
    if needs_shim():
        with named_dimension_overloads_tolerated():
            for name in TORCHAX_MODULES:
                importlib.import_module(name)
    torchax = importlib.import_module("torchax")
    if pinning_broken():
        torchax.device_module.is_available = lambda: False
    _repair_promote_policy(importlib.import_module("torchax.amp"))
    return torchax


def promote_floats(args, kwargs):
    """torch autocast's "promote": every floating tensor cast to the widest floating dtype among them."""
    floats = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return args, kwargs
    widest = max((dtype.itemsize, str(dtype), dtype) for dtype in {a.dtype for a in floats})[2]
    return tree_map_only(
        lambda a: isinstance(a, torch.Tensor) and a.is_floating_point(), lambda a: a.to(widest), (args, kwargs)
    )


def _repair_promote_policy(amp) -> None:
    original = amp.execute_policy
    if getattr(original, "turbotrain_repaired", False):
        return

    def execute_policy(policy, args, kwargs, target_lower_fp):
        if policy == amp.CastPolicy.PROMOTE:
            return promote_floats(args, kwargs)
        return original(policy, args, kwargs, target_lower_fp)

    execute_policy.turbotrain_repaired = True
    amp.execute_policy = execute_policy


def pinning_broken() -> bool:
    """True when pinning host memory fails because a PrivateUse1 device has no hooks registered."""
    if not torch.accelerator.is_available():
        return False
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as error:
        return "PrivateUse1HooksInterface" in str(error)
    return False
