"""env.files: atomic writes."""

from __future__ import annotations

import os
import stat

import pytest

from env.files import write_atomic, write_text_atomic


def test_atomic_files_get_the_usual_mode(tmp_path):
    # mkstemp creates 0600; an atomically written file must look like open() made it.
    umask = os.umask(0o027)
    try:
        path = write_text_atomic(tmp_path / "record.json", "{}")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "record.json"
    target.write_text("old")

    def half_write(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, half_write)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_the_umask_is_read_without_being_set_where_linux_shows_it(monkeypatch, tmp_path):
    import env.files as files

    old = os.umask(0o027)
    try:
        assert files._current_umask() == 0o027
        with monkeypatch.context() as patched:  # a thread that set it to 0 for a moment could leak it to compilers
            patched.setattr(os, "umask", lambda mask: pytest.fail(f"umask({mask:o}) called"))
            assert files._current_umask() == 0o027
            written = files.write_text_atomic(tmp_path / "a.txt", "a")
        assert written.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
