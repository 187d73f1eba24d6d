"""Atomic file writes: an interrupted export or run never leaves a half-written file.

The build tooling keeps the same helper in env/files.py: it runs before the op
library exists, and importing any ``ops`` module loads that library.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it over ``target`` on success.

    Beside the target, so ``os.replace`` is a rename within one file system
    (atomic on POSIX). On any exception the temporary file is removed and
    ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the mode a plain open() would
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
