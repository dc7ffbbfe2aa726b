"""The matmul flags oneDNN may use: /proc/cpuinfo's, under oneDNN's own ISA cap (`ONEDNN_MAX_CPU_ISA`)."""

from __future__ import annotations

import pytest

from turbotrain.training import bf16_emulation
from turbotrain.utils.cpu import matmul_flags, onednn_isa_cap

EPYC = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"})
SAPPHIRE_RAPIDS = frozenset({"avx2", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16"})
ALL_FIVE = ["amx_bf16", "amx_tile", "amx_fp16", "avx512_bf16", "avx512_fp16"]


@pytest.mark.parametrize(
    "cap, usable",
    [
        (None, ALL_FIVE),
        ("ALL", ALL_FIVE),
        ("AVX10_1_512_AMX_FP16", ALL_FIVE),
        ("avx512_core_amx", ["amx_bf16", "amx_tile", "avx512_bf16", "avx512_fp16"]),  # its alias, any case
        ("AVX10_1_512_AMX", ["amx_bf16", "amx_tile", "avx512_bf16", "avx512_fp16"]),
        ("AVX512_CORE_FP16", ["avx512_bf16", "avx512_fp16"]),
        ("AVX10_1_512", ["avx512_bf16", "avx512_fp16"]),
        ("AVX512_CORE_BF16", ["avx512_bf16"]),
        ("AVX512_CORE_VNNI", []),
        ("AVX2", []),
        ("no such isa", ALL_FIVE),
    ],
)
def test_flags_above_onednns_cap_are_not_usable(monkeypatch, cap, usable):
    if cap is not None:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert matmul_flags(SAPPHIRE_RAPIDS) == usable


def test_the_older_variable_name_caps_too(monkeypatch):
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "avx2")
    assert onednn_isa_cap() == "AVX2" and matmul_flags(EPYC) == []


def test_a_capped_cpu_with_bf16_units_is_treated_as_one_without(monkeypatch):
    # with the cap oneDNN runs bf16 without the units (6.3 s for a matmul fp32 did in 20 ms): auto probes it
    probe = bf16_emulation.Probe(shape=(128, 256, 2048), fp32=1.0, autocast_bf16=9.0, emulated=1.2)
    assert bf16_emulation.decide("auto", EPYC, measure=lambda: probe) == (False, None)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert bf16_emulation.decide("auto", EPYC, measure=lambda: probe) == (True, probe)


def test_a_cap_that_hides_flags_is_named_where_the_units_are_said_missing(monkeypatch):
    from turbotrain.training.bf16_hint import bf16_hint
    from turbotrain.utils import cpu

    monkeypatch.setattr(cpu, "cpu_flags", lambda: EPYC)
    assert cpu.cap_note() == ""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpu.cap_note() == " (oneDNN capped at AVX2 by ONEDNN_MAX_CPU_ISA: it hides avx512_bf16)"
    assert "no bf16 matmul units (no amx_bf16/avx512_bf16) (oneDNN capped at AVX2" in bf16_hint(EPYC)
