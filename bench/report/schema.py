"""The report format: columns declared once, written atomically, read back with checks.

A report is three files with one stem, ``reports/<UTC timestamp>-<host>``:
  * ``.csv``          one row per (workload, shape, dtype, baseline, variant, device, layout);
  * ``.samples.npz``  the raw per-call samples of every row (for `invoke bench.compare`);
  * ``.png``          the plot (bench/report/plot.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from env.files import atomic_path

# Bump on any change of COLUMNS: compare refuses to join reports of different versions.
# 2: cpu_allocator column. 3: serving columns (clients ... errors). 4: device joins the key (one run
# measures every device), timer and vs_launch_floor columns; copy_limit, minor_faults_per_call,
# page_fault_share, thp columns; limit/copy/fresh_output rows. 5: machine_id and the power-policy columns
# (cpu_governor ... gpu_clocks). 6: the hardware facts (cpu_vendor ... gpu_model), and machine_id hashes them
# with /etc/machine-id (one VM image's machines shared the id of 5); malloc_policy, median_lo_us/median_hi_us and
# precision_target. 7: layout joins the key (natural | page_offset, bench/measure/placement.py).
SCHEMA_VERSION = 7

# (column, pandas dtype, meaning) - field order = column order. The one declaration
# of the format: writing, reading, validation and the tests all use this table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("schema_version", "int64", "version of this column table"),
    ("workload", "string", "op | add_norm | model | limit | serve"),
    ("shape", "string", "input shape, e.g. 8x128x1024"),
    ("dtype", "string", "torch dtype name of the input"),
    ("baseline", "string", "registry name (bench/plan/baselines/*.py), or copy/dispatch for limits"),
    ("variant", "string", "how the baseline is called (call, out, run, iobinding, ...)"),
    ("n", "int64", "timed samples"),
    ("min_us", "float64", "per-call time, microseconds"),
    ("median_us", "float64", ""),
    ("p90_us", "float64", ""),
    ("p99_us", "float64", ""),
    ("mean_us", "float64", ""),
    ("std_us", "float64", ""),
    ("iqr_us", "float64", "p75 - p25"),
    (
        "median_lo_us",
        "float64",
        "95% interval of the median, lower end: moving-block bootstrap over the samples (bench/measure/precision.py)",
    ),
    ("median_hi_us", "float64", "95% interval of the median, upper end"),
    (
        "precision_target",
        "float64",
        "the run stopped a row once its interval was within +- this share of the median (NaN: fixed budget)",
    ),
    ("rounds", "int64", "passes over the whole grid the samples are spread over"),
    ("block", "int64", "calls per timed sample (>1 only when a call is near the timer resolution)"),
    ("warmup", "int64", "untimed calls made before the first round's samples (fewer where they outlast the budget)"),
    ("setup_s", "float64", "one-off cost outside the timed loop: torch.compile, export, session creation"),
    ("bytes_moved", "float64", "read x + weight + bias + write y (op level); NaN where not meaningful"),
    ("gbps", "float64", "bytes_moved / median time"),
    (
        "copy_gbps",
        "float64",
        "measured copy bandwidth at the same size, shape, dtype and device (copy_limit says which copy)",
    ),
    ("copy_share", "float64", "gbps / copy_gbps"),
    (
        "copy_limit",
        "string",
        "the copy of copy_gbps: fresh_output (x.clone(); variants that allocate their output) or into_preallocated",
    ),
    ("speedup_vs_unfused", "float64", "median of unfused/call over this median, same workload/shape/dtype/device"),
    (
        "vs_launch_floor",
        "float64",
        "this median over the device's cheapest call: CPU dispatch/torch_noop; "
        "CUDA launch/empty_kernel (graph variants: launch/empty_kernel_graph)",
    ),
    ("timer_resolution_ns", "float64", "measured perf_counter_ns resolution"),
    (
        "timer",
        "string",
        "perf_counter (host clock) | cuda_events (L2 warm: calls back to back) | "
        "cuda_events+l2_flush (L2 overwritten before each call)",
    ),
    ("timestamp_utc", "string", "start of the run"),
    ("host", "string", ""),
    ("git_commit", "string", "HEAD, with -dirty when the work tree has changes"),
    ("torch", "string", "torch.__version__"),
    ("onnxruntime", "string", ""),
    ("onnx", "string", ""),
    ("compiler", "string", "C++ compiler of the build (build/toolchain.json)"),
    ("cxx11_abi", "string", "_GLIBCXX_USE_CXX11_ABI of the build"),
    ("cpu_model", "string", ""),
    ("threads", "int64", "torch.set_num_threads and ORT intra-op threads"),
    ("device", "string", "cpu, or the GPU model"),
    (
        "layout",
        "string",
        "where the inputs start in their pages: natural (as the allocator gives them, as a user's tensors) | "
        "page_offset (x at the process's page offset, spread over a run's processes)",
    ),
    (
        "cpu_allocator",
        "string",
        "thp when THP_MEM_ALLOC_ENABLE=1 (torch madvises huge pages), else default; "
        "then the malloc policy the run fixed (bench/measure/allocator.py)",
    ),
    ("other_cpu_share", "float64", "share of all cores other processes used while timing (all rounds; NaN if < 0.1 s)"),
    (
        "minor_faults_per_call",
        "float64",
        "minor page faults of the process per call while timing (getrusage, all threads)",
    ),
    (
        "page_fault_share",
        "float64",
        "est. share of the median spent serving page faults: faults/call x this run's µs per fault / median",
    ),
    ("thp", "string", "transparent huge pages as the kernel reports them: enabled=<mode> defrag=<mode>"),
    (
        "machine_id",
        "string",
        "hash of the hardware facts below with /etc/machine-id (containers on one host share it; "
        "FUSEDBENCH_MACHINE_ID overrides)",
    ),
    ("cpu_vendor", "string", "/proc/cpuinfo vendor_id"),
    ("cpu_family", "string", "/proc/cpuinfo cpu family (AMD: 25 Zen 3/4, 26 Zen 5)"),
    ("cpu_model_number", "string", "/proc/cpuinfo model (a number; cpu_model is the name)"),
    ("cpu_stepping", "string", "/proc/cpuinfo stepping"),
    ("cpu_microcode", "string", "/proc/cpuinfo microcode revision"),
    ("cpu_caches", "string", "the first CPU's caches by level and type (sysfs), e.g. L1d 32K, L1i 32K, L2 1024K"),
    ("cpu_flags_hash", "string", "hash of the CPU's feature flags (/proc/cpuinfo flags, sorted)"),
    ("hypervisor", "string", "none (no hypervisor CPU flag), else the platform's DMI vendor and product"),
    ("memory_gib", "string", "MemTotal in whole GiB"),
    ("gpu_model", "string", "CUDA rows: name, compute capability, memory, SMs, driver (no UUID); empty on CPU"),
    ("cpu_governor", "string", "cpufreq scaling governor, or 'not exposed'"),
    ("cpu_epp", "string", "cpufreq energy_performance_preference, or 'not exposed'"),
    ("cpu_boost", "string", "boost/turbo: on | off | not exposed"),
    ("cpu_freq_range_mhz", "string", "cpufreq scaling min-max, MHz, or 'not exposed'"),
    ("cpu_cur_mhz", "string", "cpufreq current frequency when the run started, MHz (a state, not compared)"),
    (
        "gpu_policy",
        "string",
        "CUDA rows (NVML): application clocks, power limit, persistence, compute mode, ECC; empty on CPU",
    ),
    ("gpu_clocks", "string", "CUDA rows (NVML): SM and memory clocks when the run started (a state, not compared)"),
    (
        "malloc_policy",
        "string",
        "default (glibc as a user's process has it, measured after warm-up) | fixed-mmap (every output of "
        "128 KiB or more a fresh mapping: the page-fault study); bench/measure/allocator.py",
    ),
    ("note", "string", "what else a reader needs (fused ORT nodes, compile mode, ...)"),
    # Serving rows (workload "serve", bench/serve): one row per configuration, samples = per-request latency.
    ("clients", "Int64", "serve: concurrent client threads; empty for other workloads"),
    ("sessions", "Int64", "serve: ORT sessions (or torch model copies) the clients share"),
    ("intra_op_threads", "Int64", "serve: intra-op threads per session (torch: torch.get_num_threads())"),
    ("inter_op_threads", "Int64", "serve: ORT inter-op threads per session (sequential execution)"),
    ("allow_spinning", "string", "serve: ORT session.intra_op.allow_spinning (1 spin, 0 sleep); '-' for torch"),
    ("physical_cores", "Int64", "serve: physical cores this process may run on (from the CPU topology)"),
    ("requests", "Int64", "serve: requests answered in the timed window"),
    ("requests_per_s", "float64", "serve: throughput, answered requests / timed window"),
    ("max_us", "float64", "serve: slowest request's latency"),
    ("mismatches", "Int64", "serve: responses that differ from the reference for their input (must be 0)"),
    ("errors", "Int64", "serve: requests that raised"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in COLUMNS)


class RowKey(NamedTuple):
    """What names a row: one per report, and the samples sidecar's key (in the CSV, the first columns' order)."""

    workload: str
    shape: str
    dtype: str
    baseline: str
    variant: str
    device: str
    layout: str


KEY_COLUMNS: tuple[str, ...] = RowKey._fields
SERVE_COLUMNS: tuple[str, ...] = COLUMN_NAMES[COLUMN_NAMES.index("clients") :]
# What a row of any other workload holds in the serving columns.
NOT_SERVING: dict[str, object] = {
    name: float("nan") if dtype == "float64" else pd.NA for name, dtype, _ in COLUMNS if name in SERVE_COLUMNS
}

SAMPLES_SUFFIX = ".samples.npz"


@dataclass(frozen=True)
class RowSamples:
    """The raw samples of one row: microseconds per call, the round each was taken in, and for a row timed on
    several CPU threads the core-placement probe of its round (bench/measure/core_sync.py; None: not probed)."""

    values: np.ndarray
    rounds: np.ndarray
    sync_us: np.ndarray | None = None

    def sync_or_nan(self) -> np.ndarray:
        """The probe reading of every sample, NaN where there was none."""
        if self.sync_us is None:
            return np.full(len(self.values), np.nan)
        return np.asarray(self.sync_us, dtype=np.float64)

    def round_sync_us(self) -> dict[int, float]:
        """Each round's core-placement reading, by round number; empty where the row was not probed."""
        if self.sync_us is None:
            return {}
        return {int(r): float(np.max(self.sync_us[self.rounds == r])) for r in np.unique(self.rounds)}

    @classmethod
    def probed(cls, values, rounds, sync) -> RowSamples:
        """Samples with each one's probe reading (NaN: that sample's round was not probed); a row none of
        whose samples was probed keeps None, as a sidecar without readings reads."""
        sync = np.asarray(sync, dtype=np.float64)
        return cls(values, rounds, sync if np.isfinite(sync).any() else None)

    @classmethod
    def single_round(cls, values) -> RowSamples:
        values = np.asarray(values, dtype=np.float64)
        return cls(values, np.zeros(len(values), dtype=np.int16))

    def round_medians(self) -> np.ndarray:
        return np.array([np.median(self.values[self.rounds == r]) for r in np.unique(self.rounds)])


class ReportError(ValueError):
    """A file is not a report of this schema version (the message says what is wrong)."""


@dataclass(frozen=True)
class ReportPaths:
    csv: Path
    samples: Path
    plot: Path

    @classmethod
    def for_csv(cls, csv: Path | str) -> ReportPaths:
        csv = Path(csv)
        stem = csv.with_suffix("")
        return cls(csv=csv, samples=stem.with_name(stem.name + SAMPLES_SUFFIX), plot=stem.with_suffix(".png"))


def row_key(row: Mapping[str, object]) -> RowKey:
    return RowKey(*(str(row[c]) for c in KEY_COLUMNS))


def to_frame(rows: pd.DataFrame | Iterable[Mapping[str, object]]) -> pd.DataFrame:
    """Rows (or a frame) -> a frame with exactly the declared columns and dtypes; one row per key."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    missing = [c for c in COLUMN_NAMES if c not in frame.columns]
    extra = [c for c in frame.columns if c not in COLUMN_NAMES]
    if missing or extra:
        raise ReportError(f"report rows do not match schema {SCHEMA_VERSION}: missing {missing}, unexpected {extra}")
    frame = frame[list(COLUMN_NAMES)].astype({name: dtype for name, dtype, _ in COLUMNS})
    duplicated = frame.duplicated(list(KEY_COLUMNS), keep=False)
    if duplicated.any():
        raise ReportError(f"more than one row per key: {frame.loc[duplicated, list(KEY_COLUMNS)].values.tolist()}")
    return frame


def write_report(csv: Path, frame: pd.DataFrame, samples: Mapping[tuple[str, ...], RowSamples]) -> ReportPaths:
    """Write the CSV and its samples sidecar, each atomically.

    The sidecar is renamed into place first and the CSV last, so a reader that
    finds the CSV always finds complete samples beside it; any exception
    (Ctrl-C included) removes both temporary files and leaves old files as they were.
    """
    paths = ReportPaths.for_csv(csv)
    keys = [row_key(r) for r in frame.to_dict("records")]
    if set(keys) != set(samples):
        raise ReportError("the samples do not belong to the rows of this report (keys differ)")
    with atomic_path(paths.csv) as tmp_csv, atomic_path(paths.samples) as tmp_samples:
        _write_samples(tmp_samples, keys, samples)
        frame.to_csv(tmp_csv, index=False)
    return paths


def _write_samples(path: Path, keys: Sequence[tuple[str, ...]], samples: Mapping[tuple[str, ...], RowSamples]) -> None:
    rows = [samples[k] for k in keys]
    with open(path, "wb") as handle:  # a file object: np.savez would append ".npz" to a bare name
        np.savez_compressed(
            handle,
            schema_version=np.array(SCHEMA_VERSION),
            keys=np.array(keys, dtype=str).reshape(len(keys), len(KEY_COLUMNS)),
            counts=np.array([len(r.values) for r in rows], dtype=np.int64),
            samples_us=np.concatenate([np.asarray(r.values, dtype=np.float64) for r in rows]) if rows else np.empty(0),
            rounds=np.concatenate([np.asarray(r.rounds, dtype=np.int16) for r in rows])
            if rows
            else np.empty(0, np.int16),
            # NaN for a sample no probe bracketed; a sidecar written before the probe existed has no such array.
            sync_us=np.concatenate([r.sync_or_nan() for r in rows]) if rows else np.empty(0),
        )


def read_report(csv: Path | str) -> pd.DataFrame:
    """Read a report CSV, checking that it is one and has this schema version."""
    csv = Path(csv)
    if not csv.is_file():
        raise ReportError(f"{csv}: no such report file")
    try:
        frame = pd.read_csv(
            csv, dtype={name: dtype for name, dtype, _ in COLUMNS if dtype == "string"}, keep_default_na=True
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ReportError(f"{csv}: not a fusedbench report CSV ({error})") from error
    if "schema_version" not in frame.columns or not set(KEY_COLUMNS) - {"layout"} <= set(frame.columns):
        raise ReportError(f"{csv}: not a fusedbench report (no schema_version/key columns)")
    versions = set(frame["schema_version"].dropna().astype(int))
    if len(versions) != 1 or not versions <= set(READABLE_SCHEMAS):
        raise ReportError(
            f"{csv}: report schema version {sorted(versions)} but this code reads versions "
            f"{', '.join(map(str, READABLE_SCHEMAS))} - re-run `invoke bench` with this checkout to compare like "
            "with like"
        )
    (version,) = versions
    try:
        migrated = to_frame(migrate(frame, version).to_dict("records"))
    except (ReportError, ValueError, TypeError) as error:
        raise ReportError(f"{csv}: {error}") from error
    migrated.attrs["schema_version"] = version  # as written: an earlier schema lacks facts (see migrate)
    return migrated


# The report schemas read (an earlier one is migrated by ``migrate``), and the columns each later one added.
READABLE_SCHEMAS = (4, 5, 6, 7)
_ADDED_IN = {
    5: ("machine_id", "cpu_governor", "cpu_epp", "cpu_boost", "cpu_freq_range_mhz", "cpu_cur_mhz", "gpu_policy")
    + ("gpu_clocks",),
    6: (
        "cpu_vendor",
        "cpu_family",
        "cpu_model_number",
        "cpu_stepping",
        "cpu_microcode",
        "cpu_caches",
        "cpu_flags_hash",
        "hypervisor",
        "memory_gib",
        "gpu_model",
        "malloc_policy",
    ),
}
# Measurements a later schema added: an earlier report has none (NaN), not a text cell.
_NUMBERS_ADDED_IN = {6: ("median_lo_us", "median_hi_us", "precision_target")}
_EARLIER = re.compile(r"^schema (\d+): ")


def earlier_schema_value(version: int, value: str) -> str:
    """A cell that an earlier schema could not fill as this one does: it says which schema, and what it holds."""
    return f"schema {version}: {value}"


def is_earlier_schema_value(value: object) -> bool:
    return isinstance(value, str) and bool(_EARLIER.match(value))


def migrate(frame: pd.DataFrame, version: int) -> pd.DataFrame:
    """A report frame of schema ``version`` in this schema's columns; every fact it could not record says so.

    Columns a later schema added are filled with "schema N: not recorded"; a
    column whose meaning changed keeps its value under the same mark
    (machine_id before 6 hashed /etc/machine-id alone, which one VM image's
    machines share). `bench.compare` refuses such a report unless forced.
    The layout, which was not a column before 7 but is known, is filled as
    measured (``earlier_layout``).
    """
    frame = frame.copy()
    for later in sorted(v for v in _ADDED_IN if v > version):
        for column in _ADDED_IN[later]:
            if column not in frame.columns:
                frame[column] = earlier_schema_value(version, "not recorded")
    for later in sorted(v for v in _NUMBERS_ADDED_IN if v > version):
        for column in _NUMBERS_ADDED_IN[later]:
            if column not in frame.columns:
                frame[column] = float("nan")
    if version < 6 and "machine_id" in frame.columns:
        frame["machine_id"] = [
            v if is_earlier_schema_value(v) else earlier_schema_value(version, str(v)) for v in frame["machine_id"]
        ]
    if version < 7:
        frame["layout"] = [earlier_layout(r.workload, r.baseline, r.device) for r in frame.itertuples()]
    frame["schema_version"] = SCHEMA_VERSION
    return frame


def earlier_layout(workload: str, baseline: str, device: str) -> str:
    """The layout a row of a schema before 7 was measured at: every CPU input was placed at the process's page
    offset (the op's, add + norm's and model's x, and the copy that reads it); the floors and the GPU's rows
    have none placed, as this schema's rows of them say."""
    placed = device == "cpu" and (workload in ("op", "add_norm", "model") or baseline == "copy")
    return "page_offset" if placed else "natural"


def read_samples(csv: Path | str) -> dict[tuple[str, ...], RowSamples]:
    """The raw samples (microseconds per call, with their rounds) of a report, by row key."""
    path = ReportPaths.for_csv(csv).samples
    if not path.is_file():
        raise ReportError(f"{path}: samples sidecar of {Path(csv).name} is missing (needed for the statistics)")
    try:
        with np.load(path, allow_pickle=False) as data:
            version = int(data["schema_version"])
            keys, counts, flat, rounds = data["keys"], data["counts"], data["samples_us"], data["rounds"]
            sync = data["sync_us"] if "sync_us" in data.files else None
    except (OSError, KeyError, ValueError) as error:
        raise ReportError(f"{path}: not a fusedbench samples file ({error})") from error
    if version not in READABLE_SCHEMAS:  # the sidecar's layout is the same in all of them
        raise ReportError(f"{path}: samples schema version {version}, this code reads {READABLE_SCHEMAS}")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    readings = np.full(len(flat), np.nan) if sync is None else sync
    return {
        sample_key(keys[i], version): RowSamples.probed(
            flat[bounds[i] : bounds[i + 1]], rounds[bounds[i] : bounds[i + 1]], readings[bounds[i] : bounds[i + 1]]
        )
        for i in range(len(counts))
    }


def sample_key(key, version: int) -> tuple[str, ...]:
    """A samples sidecar's key of schema ``version`` as this schema's (before 7 it had no layout)."""
    key = tuple(str(v) for v in key)
    if version < 7:
        workload, _, _, baseline, _, device = key
        key = (*key, earlier_layout(workload, baseline, device))
    return key
