"""torchax_compat.py: the shim tolerates only named-dimension overloads, only while it is active, and
after the import torch still pins host memory (checked in a fresh process: importing torchax changes
torch's device registry for the whole process), and autocast's promote policy follows torch's rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from turbotrain.backends.xla.torchax_compat import (
    RemovedOverload,
    named_dimension_overloads_tolerated,
    needs_shim,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not needs_shim(), reason="this torch still has the named-dimension overloads")
def test_only_named_dimension_overloads_become_placeholders_and_only_inside():
    with named_dimension_overloads_tolerated():
        assert isinstance(torch.ops.aten.prod.dim_Dimname, RemovedOverload)
        assert isinstance(torch.ops.aten.std.names_dim, RemovedOverload)
        assert torch.ops.aten.prod.dim_Dimname != torch.ops.aten.prod.dim_int
        with pytest.raises(AttributeError):
            torch.ops.aten.prod.no_such_overload  # noqa: B018 (attribute access is the test)
    with pytest.raises(AttributeError):
        torch.ops.aten.prod.dim_Dimname  # noqa: B018 (attribute access is the test)


@pytest.mark.requires_xla
def test_torchax_imports_and_dataloaders_still_pin_memory():
    script = (
        "import torch\n"
        "from turbotrain.backends.xla.torchax_compat import import_torchax\n"
        "torchax = import_torchax()\n"
        "loader = torch.utils.data.DataLoader([torch.ones(2)] * 4, batch_size=2, pin_memory=True)\n"
        "assert len(list(loader)) == 2\n"
        "print(torchax.__version__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_autocast_promote_casts_floats_to_the_widest_wherever_they_sit():
    from turbotrain.backends.xla.torchax_compat import promote_floats

    half, full = torch.ones(2, dtype=torch.bfloat16), torch.ones(2)
    (tensors,), _ = promote_floats(([half, full],), {})  # torch.cat([a, b]): a list, not tensors
    assert [t.dtype for t in tensors] == [torch.float32, torch.float32]
    index = torch.tensor([1, 0])
    (target, dim, kept_index, source), _ = promote_floats((half, 0, index, full), {})  # index_copy
    assert (target.dtype, dim, kept_index.dtype, source.dtype) == (torch.float32, 0, torch.int64, torch.float32)
