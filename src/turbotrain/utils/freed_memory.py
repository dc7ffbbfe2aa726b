"""Hand memory the process has freed back to the system, so its resident set is what is still live.

`release_freed_memory()`: a garbage collection, then (on Linux with glibc) `malloc_trim(0)`, which returns the
heap's free pages. glibc keeps freed blocks below its mmap threshold (up to 32 MB each) resident for reuse; the
install-time self-checks free many such blocks (a small batch's activations, logits and gradients), so without
this a turbotrain process held more memory than stock's before its first step (issue 34: 0.5-0.6 GB at a
151,936 vocabulary). Nothing live is touched; a system without glibc keeps what its allocator holds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def release_freed_memory() -> bool:
    """Collect garbage and trim the C heap; True where the trim ran (glibc)."""
    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        return False
    return True
