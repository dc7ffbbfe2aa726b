"""The output directory is checked before training and locked for one run at a time; the lock removes its file
and the folders it made when it leaves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from turbotrain.cli import main
from turbotrain.pretrain.guard import LOCK_NAME, OutputDirLock, _still_named


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


def test_a_start_that_fails_under_the_lock_leaves_no_folder_and_no_lock_file(tmp_path):
    out = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(RuntimeError, match="corpus failed"), OutputDirLock(out):
        assert (out / LOCK_NAME).is_file()
        raise RuntimeError("corpus failed")
    assert list(tmp_path.iterdir()) == [], "every folder the lock made is gone"


def test_a_run_keeps_its_folder_and_leaves_no_lock_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("12345")  # a SIGKILLed run's stale lock file: taken over, removed on leaving
    with OutputDirLock(out):
        (out / "model.safetensors").write_bytes(b"weights")
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_a_refused_lock_leaves_the_holders_lock_file(tmp_path):
    with OutputDirLock(tmp_path / "out"):
        with pytest.raises(ValueError, match="another run"), OutputDirLock(tmp_path / "out"):
            pass
        assert (tmp_path / "out" / LOCK_NAME).read_text() == str(os.getpid())
    assert not (tmp_path / "out").exists()


def test_a_lock_file_removed_after_it_was_opened_is_not_taken(tmp_path):
    """The race the removal allows: a run opens the lock file, its holder removes it on leaving, the run locks
    the old file; it must see the path names another file (or none) and open it again."""
    path = tmp_path / LOCK_NAME
    with open(path, "a+") as old:
        assert _still_named(old, path)
        path.unlink()
        assert not _still_named(old, path)
        path.write_text("")  # the next run's new lock file
        assert not _still_named(old, path)
    with OutputDirLock(tmp_path):  # and the lock itself takes the path's file
        assert (tmp_path / LOCK_NAME).read_text() == str(os.getpid())
