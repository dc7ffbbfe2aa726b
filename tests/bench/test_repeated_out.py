"""`turbotrain bench`, `bench-ondevice` and `profile-ort` run again into an `--out` holding an earlier run's
results (issue 46): refused before any work with one line naming --overwrite, every file as it was; with
--overwrite the command goes on (bench: a throwaway workload end to end; the other two up to their first work)."""

from __future__ import annotations

import pytest

from tests.bench.test_flags import throwaway  # noqa: F401 (the fixture: a workload that trains nothing)
from tests.folder_snapshot import snapshot
from turbotrain.cli import main


class Started(Exception):
    """Raised by the first piece of real work: the command got past the folder check."""


def refused_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.usefixtures("throwaway")
def test_a_second_bench_into_the_same_out_is_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--task", "throwaway", "--out", str(out)]
    assert main(argv) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert main(argv) == 2
    line = refused_line(capsys)
    assert line.startswith(f"turbotrain bench: error: {out} already holds a benchmark (bench.json, bench.md")
    assert line.endswith("add --overwrite to replace it, or choose another --out")
    assert snapshot(out) == before
    assert main([*argv, "--overwrite"]) == 0
    assert f"--overwrite: {out} holds a benchmark" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command, earlier, first_work",
    [
        ("bench-ondevice", "ondevice.json", "turbotrain.export.export_training_artifacts"),
        ("profile-ort", "op_times.json", "turbotrain.bench.workloads.corpus_lm.CorpusLM.data"),
    ],
)
def test_ondevice_and_profile_refuse_an_earlier_out_unless_overwrite(
    tmp_path, capsys, monkeypatch, command, earlier, first_work
):
    out = tmp_path / "out"
    out.mkdir()
    (out / earlier).write_text("{}\n")
    before = snapshot(out)
    assert main([command, "--out", str(out)]) == 2
    assert f"{out} already holds" in refused_line(capsys) and snapshot(out) == before

    def start(*args, **kwargs):
        raise Started

    monkeypatch.setattr(first_work, start)
    with pytest.raises(Started):
        main([command, "--out", str(out), "--overwrite"])
    assert f"--overwrite: {out} holds" in capsys.readouterr().out
