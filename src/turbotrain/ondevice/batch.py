"""Check a batch against the manifest before ONNX Runtime sees it.

ONNX Runtime takes what it is given: a negative token id wraps around the embedding table (id -100
gives id 100's row), float ids are truncated, and shapes that disagree or a sequence longer than the
position table fail deep inside a kernel. `check_batch(manifest, batch)` turns each into one
`ValueError` naming the input, what was found and what the model takes:

* every input the manifest lists is there (`KeyError` otherwise), with its rank (one size per axis);
* integer inputs hold integers (float ids are refused, not truncated);
* axes with the same name (`batch`, `sequence`) have the same size in every input; none is empty;
* `input_ids` in [0, vocab_size); `attention_mask` 0 or 1; `labels` in [0, label_classes) or -100;
* the sequence axis at most `max_positions`.

The ranges come from `manifest.limits`; a manifest written before limits were recorded gets the sign
checks only. Returns the arrays converted to the manifest's dtypes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from turbotrain.ondevice.manifest import Manifest

IGNORE_INDEX = -100
SEQUENCE_AXIS = "sequence"


def check_batch(manifest: Manifest, batch: Mapping) -> dict[str, np.ndarray]:
    arrays = {name: _convert(name, batch, spec) for name, spec in manifest.batch_inputs.items()}
    _check_axes(manifest, arrays)
    limits = manifest.limits
    for name, value in arrays.items():
        if name == "input_ids":
            _check_range(name, value, limits.get("vocab_size"), "token ids", allow_ignore=False)
        elif name == "labels" and value.dtype.kind in "iu":
            _check_range(name, value, limits.get("label_classes"), "label classes", allow_ignore=True)
        elif name == "attention_mask" and not np.isin(value, (0, 1)).all():
            raise ValueError(f"attention_mask must hold 0 and 1 only, found values {np.unique(value)[:5].tolist()}")
    return arrays


def _convert(name: str, batch: Mapping, spec: dict) -> np.ndarray:
    if name not in batch:
        raise KeyError(f"batch lacks {name!r}; it needs {name!r} with axes {spec['axes']}")
    value = np.asarray(batch[name])
    dtype = np.dtype(spec["dtype"])
    if dtype.kind in "iu" and value.dtype.kind not in "iub":
        raise ValueError(f"{name} must hold integers ({dtype}), got {value.dtype}: float ids would be truncated")
    if value.ndim != len(spec["axes"]):
        raise ValueError(f"{name} has shape {value.shape}; expected axes {spec['axes']}")
    return value.astype(dtype, copy=False)


def _check_axes(manifest: Manifest, arrays: dict[str, np.ndarray]) -> None:
    """Same-named axes agree across inputs; no axis is empty; the sequence fits the position table."""
    seen: dict[str, tuple[str, int]] = {}
    for name, value in arrays.items():
        for axis, size in zip(manifest.batch_inputs[name]["axes"], value.shape):
            if size == 0:
                raise ValueError(f"{name} has shape {value.shape}: the batch is empty along {axis!r}")
            first = seen.setdefault(axis, (name, size))
            if first[1] != size:
                raise ValueError(
                    f"{name} has shape {value.shape} but {first[0]} has shape {arrays[first[0]].shape}: "
                    f"they disagree on {axis!r} ({size} vs {first[1]})"
                )
    positions = manifest.limits.get("max_positions")
    if positions is not None and SEQUENCE_AXIS in seen and seen[SEQUENCE_AXIS][1] > positions:
        raise ValueError(
            f"a sequence of {seen[SEQUENCE_AXIS][1]} tokens is longer than the model's {positions} "
            f"positions; cut sequences to at most {positions} tokens"
        )


def _check_range(name: str, value: np.ndarray, limit: int | None, what: str, allow_ignore: bool) -> None:
    real = value[value != IGNORE_INDEX] if allow_ignore else value
    if real.size == 0:
        return
    low, high = int(real.min()), int(real.max())
    if limit is None:
        if low < 0:
            raise ValueError(f"{name} holds {low}: negative values are not {what}")
        return
    if low < 0 or high >= limit:
        bad = low if low < 0 else high
        reason = "a negative value would wrap around" if bad < 0 else f"the model has {limit} {what}"
        raise ValueError(f"{name} holds {bad}, outside [0, {limit}){' (or -100)' if allow_ignore else ''}: {reason}")
