#!/usr/bin/env bash
# The wheels scripts/gpu_check.py needs beyond the GPU machine's image, fetched on a machine with an index,
# for the device's Python 3.12 on x86-64, into .whl/ (ignored by git; carried to the device: docs/gpu.md).
#
#   bash scripts/gpu_wheels.sh            # then carry .whl and install it there with --no-deps --target
#
# What and why (the image has torch, transformers, accelerate, peft, onnxruntime (CPU), jax (CUDA), triton):
#   datasets, dill, multiprocess   turbotrain imports datasets; TRL needs it
#   pyarrow                        datasets 5.2 needs pyarrow >= 24 (the image's may be older)
#   trl                            the `trl padding_free` peer
#   liger-kernel                   the `liger` peer (Trainer's use_liger_kernel=True)
#   torchax                        the xla backend's row (optax and jax are in the image)
# About 52 MB: the device tree travels with at most 64 MiB in all. flash-attn has no wheel for the image's
# torch and CUDA, so the flash_attention_2 peer reports itself as not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl
exclude="$(git rev-parse --git-path info/exclude)"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
mkdir -p "$dest"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$dest" \
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pyarrow==24.0.0 trl==1.16.0 liger-kernel==0.8.5 torchax==0.0.13
du -sh "$dest"
