"""What one benchmark run is asked to do (:class:`BenchOptions`, the CLI's defaults) and where its report goes.

The defaults here are the CLI's too: tasks.py reads them, so each is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from env.cpu_use import usable_cpus

# Seconds per variant over all rounds, a cap that only rows still wider than the precision asked spend (warm-up
# included where a long call is timed as one series); --quick keeps CI under ~3 minutes. A full run's 0.25 s a
# process instead of 0.33 s saves about 12 s of the main job and widens the median row's interval by 0.1-0.2
# points (reports/mainjob/README.md).
BUDGET_S = {"full": 0.75, "quick": 0.25}
MIN_SAMPLES = 20  # per variant, over all rounds
# A round's share of MIN_SAMPLES is capped at this. The floor binds only where calls outlast the round's budget
# (0.1-0.5 s a call at 32x512x4096, most of a full run's time): there, 3 samples in each of 3 processes instead of
# 4 move a row's median by 0.6 % (median over those rows) and widen their intervals by about 1.5 points at the median
# and not at the 90th percentile (reports/mainjob/sample_floor/), for one call fewer a variant and process, about
# 4 s a process. The median row of a full run is a short call ended by its width or budget: unchanged. Runs of 7
# rounds and more (the A/B pairs) have shares of 3 or less: unchanged.
ROUND_FLOOR_CAP = 3
ROUNDS = 3


@dataclass(frozen=True)
class BenchOptions:
    baseline: str = "all"
    quick: bool = False
    warmup: int = 50
    threads: int | None = None  # None or 0: every core this process may run on
    out_dir: Path | None = None
    dtype: str = ""  # "": each device's default dtypes (bench/plan/workloads.py GRIDS)
    budget_s: float | None = None
    op_shapes: tuple[tuple[int, ...], ...] | None = None  # override every device's grid (tests)
    # The fused residual add + norm's shapes; None: the grid's (none when op_shapes overrides the grid)
    add_norm_shapes: tuple[tuple[int, ...], ...] | None = None
    model_batches: tuple[tuple[str, int, int], ...] | None = None
    rounds: int = ROUNDS
    device: str = "all"  # cpu | cuda | all (every device present) | a comma list
    l2_flush: bool = False  # CUDA: overwrite L2 before each timed call of a case that fits in it
    # Only these jobs (labels, as job_label gives them), with the limits they are read against; None: every job
    jobs: tuple[str, ...] | None = None
    # Only these rows (row_label: a job's label, "/", a variant), and no limits: rows looked at again, on their
    # own (an A/B run's second stage). None: every row of the planned jobs
    rows: tuple[str, ...] | None = None
    # glibc's malloc policy (bench/measure/allocator.py): default, as a user's process has it, or fixed-mmap
    # (every large output a fresh mapping: the page-fault study)
    allocator: str = "default"
    # A row stops once the 95 % interval of its median is within +- this share of it (bench/measure/precision.py);
    # its time budget is then a cap
    precision: float = 0.02
    # Where an op case's inputs start in their pages (bench/measure/placement.py): all (natural, then the
    # process's page offset), natural, or page_offset
    layouts: str = "all"

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"


def default_threads() -> int:
    """One thread a usable CPU (the process's affinity)."""
    return usable_cpus()


def unique_csv(directory: Path, timestamp: str, host: str) -> Path:
    """``<timestamp>-<host>.csv`` in ``directory``, with -2, -3, ... where that name is taken."""
    safe_host = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    path = directory / f"{timestamp}-{safe_host}.csv"
    suffix = 2
    while path.exists():
        path = directory / f"{timestamp}-{safe_host}-{suffix}.csv"
        suffix += 1
    return path
