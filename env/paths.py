"""Where the repository and its build outputs live (never the working directory)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def build_dir() -> Path:
    """Root of all build outputs; FUSEDBENCH_BUILD_DIR overrides ``<repo>/build``."""
    return Path(os.environ.get("FUSEDBENCH_BUILD_DIR", REPO_ROOT / "build")).resolve()


REPORTS_VARIABLE = "FUSEDBENCH_REPORTS_DIR"


def reports_dir(out_dir: Path | str | None = None) -> Path:
    """Where reports go: ``out_dir`` (an --out option), else $FUSEDBENCH_REPORTS_DIR, else ``<repo>/reports``."""
    return Path(out_dir or os.environ.get(REPORTS_VARIABLE) or REPO_ROOT / "reports").resolve()


def toolchain_record_path() -> Path:
    """JSON record of the last ``invoke build``: toolchain facts and artifact paths."""
    return build_dir() / "toolchain.json"


def csrc_dir() -> Path:
    """The C++/CUDA sources; FUSEDBENCH_CSRC_DIR overrides ``<repo>/csrc`` (to build a modified copy)."""
    return Path(os.environ.get("FUSEDBENCH_CSRC_DIR", REPO_ROOT / "csrc")).resolve()
