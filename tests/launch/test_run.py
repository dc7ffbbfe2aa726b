"""`turbotrain run script.py`: the script runs as `python script.py` would, with turbotrain's classes, and
says at the end what it made; exit codes and tracebacks are the script's. In this process (fast); the
entry points and launchers in subprocesses are in test_launchers.py."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.launch.tiny_scripts import SUBCLASS
from turbotrain.launch import main


def write(tmp_path, name: str, source: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def stock_run(script, *args):
    """The same script under plain Python semantics, in this process, without turbotrain."""
    import runpy

    saved = sys.argv
    sys.argv = [str(script), *args]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved


def test_a_script_subclassing_trainer_gets_turbotrain_with_the_stock_losses(tmp_path, capsys):
    script = write(tmp_path, "train.py", SUBCLASS)
    (tmp_path / "stock").mkdir()
    (tmp_path / "turbo").mkdir()
    stock_run(script, str(tmp_path / "stock"))
    assert main(["--backend", "eager", str(script), str(tmp_path / "turbo")]) == 0
    stock = json.loads((tmp_path / "stock" / "result.json").read_text())
    turbo = json.loads((tmp_path / "turbo" / "result.json").read_text())
    assert "TurboMixin" not in stock["mro"] and "TurboMixin" in turbo["mro"] and turbo["mro"][0] == "MyTrainer"
    assert turbo["args"] == "TurboTrainingArguments"
    assert len(turbo["losses"]) == len(stock["losses"]) == 6
    for a, b in zip(turbo["losses"], stock["losses"]):
        assert abs(a - b) <= 1e-5 * abs(b), (turbo["losses"], stock["losses"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("turbotrain run: train.py made 1 Trainer: MyTrainer (backend eager; passes: label_sparsity")


def test_a_script_with_no_trainer_says_nothing_was_accelerated(tmp_path, capsys):
    script = write(tmp_path, "plain.py", "print('hello')\n")
    assert main([str(script)]) == 0
    out, err = capsys.readouterr()
    assert out == "hello\n"
    assert err.strip() == "turbotrain run: plain.py made no Trainer: nothing was accelerated"


def test_the_script_sees_what_python_script_py_gives_it(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    script = write(
        tmp_path,
        "probe.py",
        """
        import json, os, sys
        import helper  # a sibling module: the script's folder is first on sys.path
        json.dump({"argv": sys.argv, "file": __file__, "name": __name__, "path0": sys.path[0],
                   "helper": helper.VALUE}, open(os.path.join(os.path.dirname(__file__), "seen.json"), "w"))
        """,
    )
    assert main([str(script), "--flag", "x"]) == 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {
        "argv": [str(script), "--flag", "x"],
        "file": str(script),
        "name": "__main__",
        "path0": str(tmp_path),
        "helper": 42,
    }
    assert sys.argv[0] != str(script), "restored after the run"


@pytest.mark.parametrize("code,expected", [("sys.exit(3)", 3), ("sys.exit(0)", 0), ("sys.exit('bye')", "bye")])
def test_system_exit_keeps_the_script_s_code(tmp_path, capsys, code, expected):
    script = write(tmp_path, "quits.py", f"import sys\n{code}\n")
    with pytest.raises(SystemExit) as exited:
        main([str(script)])
    assert exited.value.code == expected
    assert "quits.py made no Trainer" in capsys.readouterr().err


def test_a_script_that_raises_exits_1_with_its_own_traceback(tmp_path, capsys):
    script = write(tmp_path, "boom.py", "def f():\n    raise RuntimeError('boom')\n\nf()\n")
    assert main([str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f'Traceback (most recent call last):\n  File "{script}", line 4, in <module>')
    assert "RuntimeError: boom" in err and "turbotrain/launch" not in err


def test_a_missing_script_is_python_s_exit_code_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "can't open file" in capsys.readouterr().err


def test_a_misspelt_option_is_exit_code_2_listing_the_valid_ones(tmp_path, capsys):
    script = write(tmp_path, "plain.py", "print('never')\n")
    assert main(["--label-sparsty", "False", str(script)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "unknown turbotrain option 'label_sparsty'" in err and "valid options: backend" in err


def test_python_m_turbotrain_takes_a_script_or_any_turbotrain_command(tmp_path, capsys):
    from turbotrain.__main__ import main as python_m

    script = write(tmp_path, "plain.py", "print('hi')\n")
    assert python_m([str(script)]) == 0 and python_m(["run", str(script)]) == 0
    assert capsys.readouterr().out == "hi\nhi\n"
    with pytest.raises(SystemExit) as exited:
        python_m(["export", "--help"])  # a command of the `turbotrain` CLI, not a script
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("usage: turbotrain export")


class FakeGroup:
    """torch.distributed's group calls as the launcher sees them: initialized or not, the barrier before
    destroying (the ranks meet first), destroy counted."""

    def __init__(self, monkeypatch, initialized=True, fails=False):
        import torch.distributed as dist

        self.destroyed, self.barriers, self.initialized, self.fails = 0, 0, initialized, fails
        monkeypatch.setattr(dist, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(dist, "barrier", self.barrier)
        monkeypatch.setattr(dist, "destroy_process_group", self.destroy)

    def barrier(self):
        assert self.initialized, "a barrier on a destroyed group"
        self.barriers += 1

    def destroy(self):
        if self.fails:
            raise RuntimeError("gloo says no")
        self.destroyed += 1
        self.initialized = False


@pytest.mark.parametrize("source, code, destroyed", [("x = 1\n", 0, 1), ("raise ValueError('bad')\n", 1, 0)])
def test_a_finished_script_s_process_group_is_destroyed_a_failed_one_s_is_not(
    tmp_path, monkeypatch, source, code, destroyed
):
    group = FakeGroup(monkeypatch)
    assert main(["--backend", "eager", str(write(tmp_path, "s.py", source))]) == code
    assert group.destroyed == destroyed  # after an error peers may wait in a collective: the rank just exits
    assert group.barriers == destroyed  # the ranks meet before one of them shuts its connections down


def test_a_script_that_destroyed_its_group_and_a_failing_destroy_keep_the_script_s_code(tmp_path, monkeypatch, capsys):
    group = FakeGroup(monkeypatch, initialized=False)
    assert main(["--backend", "eager", str(write(tmp_path, "s.py", "x = 1\n"))]) == 0 and group.destroyed == 0
    FakeGroup(monkeypatch, fails=True)
    assert main(["--backend", "eager", str(write(tmp_path, "s.py", "x = 1\n"))]) == 0
    assert "the process group could not be destroyed at exit: gloo says no" in capsys.readouterr().err
