"""The user adapters' cache degrades, never blocks (dyn/user/cache.py): a full disk under
numba's cache compiles the adapter in memory with one note; a damaged generated file or a
damaged numba index is written again, and the model runs."""

from __future__ import annotations

import errno
import os
import textwrap

from dyn.user import cache

SOURCE = """
import numba
# {tag}
@numba.njit("float64(float64)", cache=CACHED)
def twice(x):
    return 2.0 * x + {offset}
"""


def _source(tmp_path, offset=1.0) -> str:
    """A generated source of its own (its tag: the test's folder), so no other test shares it."""
    return textwrap.dedent(SOURCE.format(tag=tmp_path, offset=offset))


def test_a_full_disk_under_numbas_cache_compiles_in_memory_with_one_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    replace = os.replace

    def full(src, dst, *args, **kwargs):  # numba writes each cache file by a rename
        if str(dst).endswith((".nbi", ".nbc")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    first = cache.load("probe", _source(tmp_path, 1.0))
    second = cache.load("probe", _source(tmp_path, 2.0))
    assert (first.twice(1.0), second.twice(1.0)) == (3.0, 4.0)
    assert first.CACHED is False and second.CACHED is False
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dyn: note:")]
    assert len(notes) <= 1 and all("compiling in memory" in note for note in notes)
    assert notes or cache._NOTED  # one note per process: another test may have printed it


def test_a_generated_file_that_is_not_text_is_written_again(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    source = _source(tmp_path)
    name = f"probe_{cache.key(source)}.py"
    (tmp_path / "dyn-user").mkdir()
    (tmp_path / "dyn-user" / name).write_bytes(b"\xff\xfe\x00garbage")
    module = cache.load("probe", source)
    assert module.CACHED is True and module.twice(1.0) == 3.0
    assert (tmp_path / "dyn-user" / name).read_text() == source


def _fresh(source: str):
    """`source` loaded as a new process would (nothing loaded yet in this one)."""
    cache._LOADED.clear()
    return cache.load("probe", source)


def test_a_damaged_index_of_numbas_cache_is_written_again(tmp_path, monkeypatch):
    """Compiled and cached, its index damaged, loaded again as a new process would: compiled
    afresh and cached again, not refused; the next load is a cache hit."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    source = _source(tmp_path)
    # numba reads NUMBA_CACHE_DIR again only at a later compile: the first load may cache
    # elsewhere, a later one is a hit
    assert max(sum(_fresh(source).twice.stats.cache_hits.values()) for _ in range(3)) == 1
    indexes = list(tmp_path.rglob("probe_*.nbi"))
    assert indexes
    for index in indexes:
        index.write_bytes(b"garbage\xff\xfe")
    module = _fresh(source)
    assert module.CACHED is True and module.twice(1.0) == 3.0
    assert sum(_fresh(source).twice.stats.cache_hits.values()) == 1
