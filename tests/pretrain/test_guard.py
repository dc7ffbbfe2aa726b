"""The output directory is checked before training and locked for one run at a time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from turbotrain.cli import main
from turbotrain.pretrain.guard import LOCK_NAME, OutputDirLock


def test_second_run_into_the_same_directory_is_refused(tmp_path):
    with OutputDirLock(tmp_path / "out"):
        with pytest.raises(ValueError, match=rf"another run \(pid {os.getpid()}\) is writing to"):
            with OutputDirLock(tmp_path / "out"):
                pass
    with OutputDirLock(tmp_path / "out"):  # released: the next run gets it
        pass


def test_lock_held_by_another_process_is_refused_and_released_when_it_dies(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, time; f = open(os.path.join("
            f"{str(out)!r}, {LOCK_NAME!r}), 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "f.write(str(os.getpid())); f.flush(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=rf"pid {holder.pid}"):
            OutputDirLock(out).__enter__()
    finally:
        holder.kill()
        holder.wait()
    assert (out / LOCK_NAME).exists()  # a stale lock file does not block: the kernel released the lock
    with OutputDirLock(out):
        pass


def test_unwritable_output_dir_is_refused_before_training(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["pretrain", "--output-dir", str(blocker / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is not writable" in err and "--output-dir" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_existing_output_dir_is_refused(tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["pretrain", "--output-dir", str(out), "--quiet"]) == 2
        assert "is not writable" in capsys.readouterr().err
    finally:
        out.chmod(0o755)
