"""Atomic file writes: an interrupted run must never leave a half-written file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it over ``target`` on success.

    The temporary file lives in the same directory so that ``os.replace`` is a
    rename within one file system, which POSIX makes atomic. On any exception
    (KeyboardInterrupt included) the temporary file is removed and ``target``
    is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the file the mode a plain open() would.
    os.chmod(tmp, 0o666 & ~_current_umask())
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_atomic(target: Path | str, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``target`` atomically."""
    with atomic_path(target) as tmp:
        write(tmp)
    return Path(target)


def write_text_atomic(target: Path | str, text: str) -> Path:
    return write_atomic(target, lambda tmp: tmp.write_text(text))
