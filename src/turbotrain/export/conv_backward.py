"""`aten.convolution_backward` as a transposed convolution, slices and a matmul, which torch's ONNX
exporter translates (it has no translation for the backward op itself; the backward graph of any model
with a Conv1d or Conv2d, such as Whisper's front end or a diffusion UNet, stopped there).

For a 1-d or 2-d convolution `y = conv(x, w, stride s, padding p, dilation d, groups g)`, per spatial axis:
- grad_input = conv_transpose(grad_y, w, stride s, padding p, dilation d, groups g) with output padding
  `in - ((out - 1) s - 2 p + d (k - 1) + 1)` (the rows the forward's floor dropped), which ONNX's
  ConvTranspose computes (when that padding is symbolic, stride - 1 then the input's first `in` rows: a
  row's value does not depend on how many follow); the forward weight [C_out, C_in/g, k] is already the
  transposed weight;
- grad_weight[o, c, j] = sum_n sum_l grad_y[n, o, l] x[n, c, l s + j d - p]: the padded input's window
  for each kernel position j (a strided slice, [N, C_in, *S_out]; im2col), stacked, then one batched
  matmul over the groups, [g, C_out/g, N L] @ [g, N L, C_in/g k]. (A convolution with grad_y as the kernel computes the
  same but ran ~10x slower than the forward's convolutions in ONNX Runtime's CPU kernels: C_in small
  GEMMs of 9 columns.)
- grad_bias = grad_y summed over the batch and spatial axes.
Exact: each entry is the same sum of the same products as torch's kernels, in another order (fp32
rounding; the tests compare with eager at 1e-5 of each gradient's scale). Not rewritten (the exporter
then refuses as before): transposed convolutions, 3-d convolutions.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch.fx.experimental.symbolic_shapes import is_concrete_int

aten = torch.ops.aten


def _per_axis(values, axes: int) -> list:
    values = list(values)
    return values * axes if len(values) == 1 else values


def convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """A decomposition of `aten.convolution_backward.default` (returns NotImplemented for forms it leaves)."""
    axes = input.dim() - 2
    if transposed or axes not in (1, 2):
        return NotImplemented
    stride, padding, dilation = (_per_axis(v, axes) for v in (stride, padding, dilation))
    kernel = list(weight.shape[2:])
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = _input_grad(grad_output, input, weight, kernel, stride, padding, dilation, groups)
    if output_mask[1]:
        grad_weight = _weight_grad(grad_output, input, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_bias = grad_output.sum([0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def _input_grad(grad_output, input, weight, kernel, stride, padding, dilation, groups):
    axes = range(len(kernel))
    # per axis: the input rows past the last window the forward's floor dropped (0 .. stride - 1)
    dropped = [
        input.shape[2 + a]
        - ((grad_output.shape[2 + a] - 1) * stride[a] - 2 * padding[a] + dilation[a] * (kernel[a] - 1) + 1)
        for a in axes
    ]
    symbolic = not all(is_concrete_int(d) for d in dropped)
    extra = [s - 1 for s in stride] if symbolic else [int(d) for d in dropped]
    # [N, C_out, *S_out] -> [N, C_in, *S] (symbolic: [N, C_in, *S + extra], cut to S below)
    grad = aten.convolution.default(grad_output, weight, None, stride, padding, dilation, True, extra, groups)
    for a in axes if symbolic else ():
        grad = grad.narrow(2 + a, 0, input.shape[2 + a])
    return grad


def _weight_grad(grad_output, input, kernel, stride, padding, dilation, groups):
    n, c_in, *_ = input.shape
    c_out, *size_out = grad_output.shape[1:]
    pads = [p for axis in reversed(range(len(kernel))) for p in (padding[axis], padding[axis])]
    padded = aten.constant_pad_nd.default(input, pads) if any(pads) else input
    windows = []  # one [N, C_in, *S_out] slice of the padded input per kernel position, as the forward saw it
    for offsets in itertools.product(*(range(k) for k in kernel)):
        window = padded
        for axis, (j, out) in enumerate(zip(offsets, size_out)):
            start = j * dilation[axis]
            window = aten.slice.Tensor(window, 2 + axis, start, start + stride[axis] * (out - 1) + 1, stride[axis])
        windows.append(window)
    positions, length = len(windows), math.prod(size_out)
    # [N, C_in, k, *S_out] -> [N, g, C_in/g k, L] -> [g, N L, C_in/g k]
    columns = torch.stack(windows, 2).reshape(n, groups, c_in // groups * positions, length)
    columns = columns.permute(1, 0, 3, 2).reshape(groups, n * length, c_in // groups * positions)
    # [N, C_out, *S_out] -> [N, g, C_out/g, L] -> [g, C_out/g, N L]
    grads = grad_output.reshape(n, groups, c_out // groups, length).permute(1, 2, 0, 3)
    grads = grads.reshape(groups, c_out // groups, n * length)
    return torch.bmm(grads, columns).reshape(c_out, c_in // groups, *kernel)  # [C_out, C_in/g, *k]


def training_decompositions() -> dict:
    """Core ATen decompositions plus the ones above: the table every traced training graph is built with."""
    from turbotrain.boundaries.torch_boundary import core_aten_decompositions

    table = core_aten_decompositions()
    table[aten.convolution_backward.default] = convolution_backward
    return table
