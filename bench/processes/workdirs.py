"""Where the fresh processes of a run share the setup they cache on disk (ONNX exports, Inductor's caches).

Its own module because three callers name these folders and none of them owns the others: the multi-process
driver (bench/ab/driver.py), a one-process run (bench/run.py) and the bench task, which fills a plain run's
folder before its processes start (bench/plan/warm_exports.py).
"""

from __future__ import annotations

from pathlib import Path

RUN_SIDE = "RUN"  # the one side of a plain run; an A/B run's sides are named by the driver


def side_workdir(cache_root: Path, label: str) -> Path:
    """Where the processes of one side (``label``) share their setup under ``cache_root``."""
    return cache_root / label.lower() / "cache"


def run_workdir(setup_cache: Path) -> Path:
    """The workdir a plain run's processes share under ``setup_cache``."""
    return side_workdir(setup_cache, RUN_SIDE)
