"""Atomic file writes: an interrupted run must never leave a half-written file."""

from __future__ import annotations

import os
import tempfile
import threading
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


_UMASK_LOCK = threading.Lock()


def _current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (build steps run in threads, and a
    compiler started while another thread had set it to 0 would write world-writable files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # elsewhere the only way to read it is to set it; the lock keeps our own threads apart
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
