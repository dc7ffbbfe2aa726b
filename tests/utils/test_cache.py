"""One cache folder for everything turbotrain keeps per machine, `$TURBOTRAIN_CACHE` honoured by every user."""

from __future__ import annotations

from turbotrain.backends import auto
from turbotrain.backends.onnxruntime import OrtOptions
from turbotrain.utils.cache import cache_dir, cache_root, write_atomically


def test_turbotrain_cache_moves_every_cache(tmp_path, monkeypatch):
    root = tmp_path / "elsewhere"
    monkeypatch.setenv("TURBOTRAIN_CACHE", str(root))
    assert cache_root() == root and not root.exists()  # naming it creates nothing
    assert cache_dir() == root and root.is_dir()
    assert OrtOptions().cache_dir == root / "onnxruntime"  # the exported graphs (was always ~/.cache)
    assert OrtOptions.from_dict({"cache_dir": None}).cache_dir is None
    auto.write_cache("key", {"choice": "eager"})
    assert (root / auto.CACHE_FILE).is_file() and auto.read_cache("key")["choice"] == "eager"


def test_without_the_variable_it_is_the_xdg_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TURBOTRAIN_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "turbotrain"
    assert OrtOptions().cache_dir == tmp_path / "turbotrain" / "onnxruntime"


def test_write_atomically_replaces_the_whole_file(tmp_path):
    path = tmp_path / "f.json"
    write_atomically(path, "one")
    write_atomically(path, "two")
    assert path.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
