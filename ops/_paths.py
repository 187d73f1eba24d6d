"""Where the op package reads and writes its files, in a source checkout and when installed.

The package works from an installed wheel, with no source tree: nothing here
assumes one. In a checkout (``ops/`` beside ``csrc/``) outputs go to
``<checkout>/build`` like every build output; installed, they go to the
user's cache folder. ``FUSEDBENCH_BUILD_DIR`` overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def source_checkout() -> Path | None:
    """The checkout this package is imported from, or None when it is installed."""
    root = PACKAGE_DIR.parent
    return root if (root / "csrc").is_dir() and (root / "tasks.py").is_file() else None


def build_dir() -> Path:
    """Root of the outputs: $FUSEDBENCH_BUILD_DIR, else <checkout>/build, else the user's cache folder."""
    explicit = os.environ.get("FUSEDBENCH_BUILD_DIR")
    if explicit:
        return Path(explicit).resolve()
    checkout = source_checkout()
    if checkout is not None:
        return checkout / "build"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(cache) / "fusedbench" / "build").resolve()


def toolchain_record_path() -> Path:
    """JSON record of the last ``invoke build``: toolchain facts and artifact paths."""
    return build_dir() / "toolchain.json"
