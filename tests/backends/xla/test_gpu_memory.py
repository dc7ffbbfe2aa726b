"""jax beside torch on one GPU (backends/xla/gpu_memory.py): preallocation off before jax's GPU client starts,
the user's own setting kept, a refusal when it is too late, nothing for CPU runs."""

from __future__ import annotations

import warnings

import pytest
import torch

from turbotrain.backends import BackendUnavailable
from turbotrain.backends.xla.gpu_memory import MEM_FRACTION, PREALLOCATE, jax_gpu_started, share_gpu_with_torch


def test_a_cuda_run_turns_preallocation_off():
    environ = {}
    assert share_gpu_with_torch(torch.device("cuda", 0), environ, gpu_started=lambda: False) is not None
    assert environ == {PREALLOCATE: "false"}


@pytest.mark.parametrize("setting", [{PREALLOCATE: "true"}, {MEM_FRACTION: ".3"}])
def test_the_users_setting_stands(setting):
    environ = dict(setting)
    assert share_gpu_with_torch("cuda", environ, gpu_started=lambda: True) is None
    assert environ == setting


def test_too_late_is_refused_with_what_to_set():
    with pytest.raises(BackendUnavailable, match=f"{PREALLOCATE}=false"):
        share_gpu_with_torch("cuda", {}, gpu_started=lambda: True)


def test_cpu_runs_are_left_alone():
    environ = {}
    assert share_gpu_with_torch("cpu", environ, gpu_started=lambda: True) is None and environ == {}


def test_no_gpu_client_on_this_machine():
    assert jax_gpu_started() is False  # jax here runs on the CPU (or was never started)


@pytest.mark.requires_xla
def test_a_cpu_only_jax_beside_a_gpu_model_is_said():
    """A CPU-only jaxlib on a GPU machine would step on the CPU with the GPU idle: one warning naming what to do."""

    from turbotrain.backends.xla.loop import warn_if_accelerator_idle
    from turbotrain.utils.warnings import TurbotrainWarning

    with pytest.warns(TurbotrainWarning, match="steps on jax's CPU devices, while the model is on cuda"):
        warn_if_accelerator_idle(torch.device("cuda", 0), ["cpu", "cpu"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_accelerator_idle(torch.device("cpu"), ["cpu"])  # a CPU run: nothing to say
        warn_if_accelerator_idle(torch.device("cuda", 0), ["gpu"])
