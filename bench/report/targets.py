"""The performance targets, declared as a table and judged on one report.

Each target's name says what it measures and the bar it must clear. Every
ratio is taken between rows of the same report and device: absolute times
differ between machines, ratios measured in one run do not. The CPU targets
count the CPU's fp32 rows unless a target names other dtypes, and are judged
at each thread count the report measured (a report made of a 1-thread and a
2-thread run states every CPU target twice); the GPU targets are judged on
each GPU's rows, the dtype named in each.

The op rows and their copies are judged at the natural layout (inputs as the
allocator gives them: what a user's tensors get), the copy shares again at
each other layout the report measured, under a name that says which; a
report with no natural rows (one from before the layout column) is judged at
the layout it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from bench.measure.allocator import DEFAULT as DEFAULT_POLICY
from bench.measure.allocator import FIXED_MMAP, MMAP_THRESHOLD_BYTES
from bench.measure.placement import NATURAL
from bench.plan import grid
from bench.plan.grid import shape_elements, shape_label

DISPATCH_BOUND = shape_label(grid.DISPATCH_BOUND)  # 16 KiB: the per-call overhead dominates
# 4 MiB of x and 4 MiB of y fit the CPU's last-level cache (32 MiB on the
# reference VM), so the copy itself runs from cache there, at several times
# DRAM bandwidth: the hardest row for a kernel that reads x twice.
CACHE_RESIDENT_COPY = shape_label(grid.CACHE_RESIDENT)
# fp32 from MODEL_WIDTH up: 80 % of the copy. Both passes at vector width leave only the second read of x,
# from L1/L2; 85 % was the bar, but at the cache-resident shape the copy itself runs from the cache at several
# times DRAM bandwidth, and a row's interval on a 2-core VM is +-2 %: 80 % judged on the interval's ends says
# something about the kernel, 85 % on a point estimate said as much about the run's noise.
CPU_COPY_SHARE = 0.80
FIRST_BANDWIDTH_SHAPE = shape_label(grid.MODEL_WIDTH)  # from here up the op moves enough bytes to be judged so
# At the dispatch-bound shape the copy takes about a microsecond and torch's own call path (the op's out call
# on one row, a limit row of the report) more than the bar left: a share of the copy there measured torch.
# So the op is judged on its time above that floor: out - one-row call <= copy time / DISPATCH_COPY_SHARE.
DISPATCH_COPY_SHARE = 0.85
CPU_16BIT_COPY_SHARE = 0.70  # bf16/fp16 past the last-level cache: the conversions add integer work per element
# The last-level cache of the reference VM: a 16-bit row whose x and y fit it is judged against the fp32 out
# variant of its shape (never slower per element), since the copy there moves half the bytes from the cache,
# which no arithmetic on the same elements reaches.
LLC_BYTES = 32 * 2**20
# The folded model moves the same bytes minus the adds' round trips: the gain (0.16 % of the forward) is below
# the run's resolution, so the bar is "not slower": folded/unfolded's interval ends at or below 1.02.
FOLDED_MARGIN = 1.02
ORT_MARGIN = 1.10
MODEL_MARGIN = 1.05  # "measurably faster": at least 5 % beyond equal medians
# The fused residual add + norm against the add and the fused norm as two calls: one call and one pass
# over the inputs fewer. Where the tensors fit the last-level cache (up to CACHE_RESIDENT_COPY) the second
# call's dispatch and its re-read weigh most: 1.3x.
ADD_NORM_SPEEDUP = 1.3
# Past the cache the byte counts cap the gain: the pair moves 5 tensors (add: read 2, write 1; norm: read 1,
# write 1), the fused op 4, so 1.25x is the most two kernels at copy speed allow, and 7/6 = 1.17x once
# each written line is first read into the cache (write-allocate). 1.1x leaves the kernels 6 % of that.
# The in-place pair is judged at every shape, the allocating calls where their outputs are heap blocks: every
# shape under glibc's default policy (after warm-up the outputs are reused heap memory), only below the
# threshold under the fixed-mmap policy: past it each output is a fresh mapping, and both forms take the same
# first-touch page faults for their two outputs, which then make most of the time (386 faults, about 90 % of
# either call at 4x64x768 on the reference VM): the ratio would measure the page faults, not what the fusion
# saves.
ADD_NORM_MEMORY_BOUND_SPEEDUP = 1.1
FLOAT32_BYTES = 4  # the targets count fp32 rows
# Two threads must not lose to one. A problem of one task (32768 elements) runs on the calling thread at
# either count, so there the two rows time the same code in two runs; the margin is that noise.
THREAD_MARGIN = 1.05

Check = tuple[str, bool | None]  # (what was measured, whether it clears the bar; None: its interval straddles it)


@dataclass(frozen=True)
class Target:
    """One declared target: a name that states the bar, and how to measure it on fp32 rows."""

    name: str
    measure: Callable[[pd.DataFrame], list[Check]]
    dtypes: tuple[str, ...] = ("float32",)  # the CPU rows it is judged on
    across_threads: bool = False  # judged on the rows of every thread count at once, not per count
    per_layout: bool = False  # a copy share: judged again at each layout other than the natural one


@dataclass(frozen=True)
class TargetResult:
    name: str
    met: bool | None  # None: not measured, or inconclusive (its interval straddles the bar)
    detail: str
    inconclusive: bool = False

    @property
    def verdict(self) -> str:
        """met | missed | inconclusive | not measured."""
        if self.met is not None:
            return "met" if self.met else "missed"
        return "inconclusive" if self.inconclusive else "not measured"


VERDICT_MARKUP = {
    "met": "[green]met[/]",
    "missed": "[red]MISSED[/]",
    "inconclusive": "[yellow]inconclusive[/]",
    "not measured": "[yellow]not measured[/]",
}


def on_interval(low: float, high: float, bar: float, at_least: bool = True) -> bool | None:
    """A bar judged on an interval: cleared when the whole interval clears it, missed when none of it does."""
    if at_least:
        return True if low >= bar else (False if high < bar else None)
    return True if high <= bar else (False if low > bar else None)


def _median(frame: pd.DataFrame, workload: str, shape: str, baseline: str, variant: str) -> float | None:
    hit = frame[
        (frame.workload == workload)
        & (frame["shape"] == shape)
        & (frame.baseline == baseline)
        & (frame.variant == variant)
    ]
    return float(hit.median_us.iloc[0]) if len(hit) else None


def _policy(frame: pd.DataFrame) -> str:
    """The malloc policy the report's rows ran under (bench/measure/allocator.py)."""
    policies = set(frame["malloc_policy"].dropna()) if "malloc_policy" in frame.columns else set()
    return policies.pop() if len(policies) == 1 else DEFAULT_POLICY


def _interval(frame: pd.DataFrame, workload: str, shape: str, baseline: str, variant: str, dtype: str | None = None):
    """(median, low, high) of a row's median and its 95 % interval; the median thrice where the report has none."""
    hit = frame[
        (frame.workload == workload)
        & (frame["shape"] == shape)
        & (frame.baseline == baseline)
        & (frame.variant == variant)
        & ((frame.dtype == dtype) if dtype is not None else True)
    ]
    if not len(hit):
        return None
    row = hit.iloc[0]
    median = float(row.median_us)
    low, high = (float(row.get(c, median)) for c in ("median_lo_us", "median_hi_us"))
    return (median, median, median) if pd.isna(low) or pd.isna(high) else (median, low, high)


def _op_shapes(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame.loc[frame.workload == "op", "shape"]))


# --- measurements ---------------------------------------------------------------


def _speedup_over_unfused(need: float, shapes: Callable[[pd.DataFrame], list[str]]):
    def measure(frame: pd.DataFrame) -> list[Check]:
        checks = []
        for shape in shapes(frame):
            unfused, fused = (
                _median(frame, "op", shape, "unfused", "call"),
                _median(frame, "op", shape, "fused", "call"),
            )
            if unfused and fused:
                checks.append((f"{shape} {unfused / fused:.1f}x", unfused / fused >= need))
        return checks

    return measure


def _faster_than_compiled_and_native(frame: pd.DataFrame) -> list[Check]:
    checks = []
    for shape in _op_shapes(frame):
        fused = _median(frame, "op", shape, "fused", "call")
        for peer in ("compiled", "native"):
            other = _median(frame, "op", shape, peer, "call")
            if fused and other:
                checks.append((f"{shape} {peer}/fused {other / fused:.2f}", fused < other))
    return checks


def _call_floor(frame: pd.DataFrame, variant: str) -> str:
    """What the cheapest call through a runtime takes in this report (limits.dispatch_floor), for a miss's detail.

    A miss where the bar leaves the kernel little beyond that floor is the call's overhead, not the kernel's.
    """
    floor = _median(frame, "limit", "1", "dispatch", variant)
    if floor is None:
        return ""
    what = "a no-op torch call" if variant == "torch_noop" else "ORT's floor (an Identity graph, IO binding)"
    text = f"; {what} takes {floor:.2f}"
    one_row = _median(frame, "limit", "1x16", "dispatch", "fused_out_one_row")  # limits.ONE_ROW_SHAPE
    if variant == "torch_noop" and one_row is not None:
        text += f", this op's out call on one row of 16 elements {one_row:.2f}"
    return text


def _copy_share_of(variant: str, need: float, copy_limit: str):
    """`variant` of the fused op reaches `need` of the copy named `copy_limit`, from FIRST_BANDWIDTH_SHAPE up,
    judged on the share's interval (the op's and the copy's intervals at their ends)."""

    def measure(frame: pd.DataFrame) -> list[Check]:
        checks = []
        hit = frame[(frame.workload == "op") & (frame.baseline == "fused") & (frame.variant == variant)]
        for row in hit.itertuples():
            if getattr(row, "copy_limit", copy_limit) != copy_limit or pd.isna(row.copy_share):
                continue  # a report that compared this variant with the other copy does not measure this bar
            if shape_elements(row.shape) < shape_elements(FIRST_BANDWIDTH_SHAPE):
                continue  # judged on its floor (_above_the_floor)
            op = _interval(frame, "op", row.shape, "fused", variant, row.dtype)
            copy = _interval(frame, "limit", row.shape, "copy", copy_limit, row.dtype) or (1.0, 1.0, 1.0)
            share = float(row.copy_share)
            # The share is copy time / op time (same bytes): slowest op and fastest copy give its low end.
            low, high = share * op[0] / op[2] * copy[1] / copy[0], share * op[0] / op[1] * copy[2] / copy[0]
            dtype = "" if row.dtype == "float32" else f" {row.dtype}"
            cached = " (copy cache-resident)" if row.shape == CACHE_RESIDENT_COPY else ""
            text = f"{row.shape}{dtype}{cached} {100 * share:.0f}% [{100 * low:.0f}, {100 * high:.0f}]"
            met = on_interval(low, high, need)
            if met is False:
                # The share is of bandwidth, so at the bar the op would take median * share / need.
                text += f" (the bar allows {row.median_us * share / need:.2f} µs)"
            checks.append((text, met))
        return checks

    return measure


def _above_the_floor(frame: pd.DataFrame) -> list[Check]:
    """At the dispatch-bound shape: out - the op's one-row out call <= copy time / DISPATCH_COPY_SHARE."""
    out = _interval(frame, "op", DISPATCH_BOUND, "fused", "out", "float32")
    floor = _interval(frame, "limit", "1x16", "dispatch", "fused_out_one_row")  # limits.ONE_ROW_SHAPE
    copy = _interval(frame, "limit", DISPATCH_BOUND, "copy", "into_preallocated", "float32")
    if not (out and floor and copy):
        return []
    above, low, high = out[0] - floor[0], out[1] - floor[2], out[2] - floor[1]
    allowed, allowed_low, allowed_high = (c / DISPATCH_COPY_SHARE for c in copy)
    met = True if high <= allowed_low else (False if low > allowed_high else None)
    return [
        (
            f"{DISPATCH_BOUND} out - one-row call {above:.2f} µs [{low:.2f}, {high:.2f}] vs copy "
            f"{copy[0]:.2f} / {DISPATCH_COPY_SHARE} = {allowed:.2f} µs",
            met,
        )
    ]


def _out_variant(frame: pd.DataFrame) -> list[Check]:
    return _above_the_floor(frame) + _copy_share_of("out", CPU_COPY_SHARE, "into_preallocated")(frame)


def _sixteen_bit(frame: pd.DataFrame) -> list[Check]:
    """Past the LLC >= CPU_16BIT_COPY_SHARE of the copy; in the caches never slower than fp32 out, per element."""
    share_of_copy = _copy_share_of("out", CPU_16BIT_COPY_SHARE, "into_preallocated")
    checks = []
    for dtype in ("bfloat16", "float16"):
        rows = frame[(frame.dtype == dtype) & (frame.workload == "op") & (frame.baseline == "fused")]
        for shape in dict.fromkeys(rows.loc[rows.variant == "out", "shape"]):
            if 2 * 2 * shape_elements(shape) > LLC_BYTES:  # x and y, 2 bytes an element: past the cache
                same = (frame["shape"] == shape) & (frame.dtype == dtype)
                checks += share_of_copy(frame[same])
                continue
            half, full = (_interval(frame, "op", shape, "fused", "out", d) for d in (dtype, "float32"))
            if half and full:
                low, high = half[1] / full[2], half[2] / full[1]
                text = f"{shape} {dtype}/float32 out {half[0] / full[0]:.2f} [{low:.2f}, {high:.2f}] (in the caches)"
                checks.append((text, on_interval(low, high, 1.0, at_least=False)))
    return checks


def _ort_custom_vs_out_variant(frame: pd.DataFrame) -> list[Check]:
    """custom node <= ORT_MARGIN x out; at the dispatch-bound shape each above its own floor:
    custom - ORT's Identity graph <= ORT_MARGIN x (out - the op's one-row out call)."""
    checks = []
    for shape in _op_shapes(frame):
        out, custom = (
            _interval(frame, "op", shape, "fused", "out"),
            _interval(frame, "op", shape, "ort", "custom-iobinding"),
        )
        if not (out and custom):
            continue
        identity = _interval(frame, "limit", "1", "dispatch", "ort_identity_iobinding")
        one_row = _interval(frame, "limit", "1x16", "dispatch", "fused_out_one_row")
        if shape == DISPATCH_BOUND and identity and one_row:
            ort, ort_low, ort_high = custom[0] - identity[0], custom[1] - identity[2], custom[2] - identity[1]
            op, op_low, op_high = out[0] - one_row[0], out[1] - one_row[2], out[2] - one_row[1]
            met = True if ort_high <= ORT_MARGIN * op_low else (False if ort_low > ORT_MARGIN * op_high else None)
            checks.append(
                (
                    f"{shape} custom - Identity {ort:.2f} µs [{ort_low:.2f}, {ort_high:.2f}] vs "
                    f"{ORT_MARGIN} x (out - one-row call) {ORT_MARGIN * op:.2f} µs",
                    met,
                )
            )
            continue
        low, high = custom[1] / out[2], custom[2] / out[1]
        met = on_interval(low, high, ORT_MARGIN, at_least=False)
        text = f"{shape} custom/out {custom[0] / out[0]:.2f} [{low:.2f}, {high:.2f}]"
        if met is False:
            text += f" (the bar allows {ORT_MARGIN * out[0]:.2f} µs{_call_floor(frame, 'ort_identity_iobinding')})"
        checks.append((text, met))
    return checks


def _ort_custom_vs_standard(frame: pd.DataFrame) -> list[Check]:
    checks = []
    ort = frame[frame.baseline == "ort"]
    for (workload, shape), rows in ort.groupby(["workload", "shape"], sort=False):
        for mode in ("run", "iobinding"):
            standard = _median(rows, workload, shape, "ort", f"standard-{mode}")
            custom = _median(rows, workload, shape, "ort", f"custom-{mode}")
            if standard and custom:
                checks.append(
                    (f"{workload} {shape} {mode} custom/standard {custom / standard:.2f}", custom <= 1.10 * standard)
                )
    return checks


def _model_small_batch(frame: pd.DataFrame) -> list[Check]:
    model = frame[frame.workload == "model"]
    if not len(model):
        return []
    small = min(model["shape"].unique(), key=shape_elements)
    unfused, fused = _median(model, "model", small, "unfused", "call"), _median(model, "model", small, "fused", "call")
    if not (unfused and fused):
        return []
    return [(f"{small} unfused/fused {unfused / fused:.2f}", unfused / fused >= MODEL_MARGIN)]


def _add_norm_vs_separate_add(frame: pd.DataFrame) -> list[Check]:
    """Each variant of the fused add + norm against its two-call counterpart (``fused`` on this workload)."""
    checks = []
    for shape in dict.fromkeys(frame.loc[frame.workload == "add_norm", "shape"]):
        need = (
            ADD_NORM_SPEEDUP
            if shape_elements(shape) <= shape_elements(CACHE_RESIDENT_COPY)
            else (ADD_NORM_MEMORY_BOUND_SPEEDUP)
        )
        heap_outputs = _policy(frame) != FIXED_MMAP or shape_elements(shape) * FLOAT32_BYTES < MMAP_THRESHOLD_BYTES
        for variant in ("call", "inplace") if heap_outputs else ("inplace",):
            separate, fused = (
                _median(frame, "add_norm", shape, "fused", variant),
                _median(frame, "add_norm", shape, "fused_add", variant),
            )
            if separate and fused:
                checks.append((f"{shape} {variant} {separate / fused:.2f}x", separate / fused >= need))
    return checks


def _model_with_folded_adds(frame: pd.DataFrame) -> list[Check]:
    """Not slower: the upper end of folded/unfolded's interval <= FOLDED_MARGIN."""
    model = frame[frame.workload == "model"]
    checks = []
    for shape in dict.fromkeys(model["shape"]):
        separate, folded = (
            _interval(model, "model", shape, "fused", "call"),
            _interval(model, "model", shape, "fused_add", "call"),
        )
        if separate and folded:
            low, high = folded[1] / separate[2], folded[2] / separate[1]
            checks.append(
                (
                    f"{shape} fused_add/fused {folded[0] / separate[0]:.3f} [{low:.3f}, {high:.3f}]",
                    on_interval(low, high, FOLDED_MARGIN, at_least=False),
                )
            )
    return checks


def _two_threads_vs_one(frame: pd.DataFrame) -> list[Check]:
    """The fused out variant and call with 2 threads against 1, at every op shape measured at both counts."""
    if "threads" not in frame.columns:
        return []
    fused = frame[(frame.workload == "op") & (frame.baseline == "fused") & frame.variant.isin(("out", "call"))]
    checks = []
    for (shape, variant), rows in fused.groupby(["shape", "variant"], sort=False):
        one, two = (rows.loc[rows.threads == n, "median_us"] for n in (1, 2))
        if len(one) and len(two):
            ratio = float(two.iloc[0]) / float(one.iloc[0])
            checks.append((f"{shape} {variant} 2/1 threads {ratio:.2f}", ratio <= THREAD_MARGIN))
    return checks


# --- the table --------------------------------------------------------------------

TARGETS: tuple[Target, ...] = (
    Target(
        f"fused vs unfused at {DISPATCH_BOUND}: >= 5x",
        _speedup_over_unfused(5.0, lambda frame: [s for s in _op_shapes(frame) if s == DISPATCH_BOUND]),
    ),
    Target(
        "fused vs unfused at every larger op shape: >= 3x",
        _speedup_over_unfused(3.0, lambda frame: [s for s in _op_shapes(frame) if s != DISPATCH_BOUND]),
    ),
    Target("fused vs torch.compile and F.rms_norm at every op shape: faster", _faster_than_compiled_and_native),
    Target(
        f"fused out variant: >= {100 * CPU_COPY_SHARE:.0f}% of the copy into a preallocated buffer from "
        f"{FIRST_BANDWIDTH_SHAPE} up, judged on the interval; at {DISPATCH_BOUND} its time above its one-row call "
        f"within the copy's / {DISPATCH_COPY_SHARE}",
        _out_variant,
        per_layout=True,
    ),
    Target(
        f"fused allocating call from {FIRST_BANDWIDTH_SHAPE} up: >= {100 * CPU_COPY_SHARE:.0f}% of the fresh-output "
        "copy, judged on the interval",
        _copy_share_of("call", CPU_COPY_SHARE, "fresh_output"),
        per_layout=True,
    ),
    Target(
        f"fused out variant in bfloat16 and float16: >= {100 * CPU_16BIT_COPY_SHARE:.0f}% of the copy into a "
        "preallocated buffer past the last-level cache; in the caches never slower than the fp32 out variant",
        _sixteen_bit,
        dtypes=("bfloat16", "float16", "float32"),
        per_layout=True,
    ),
    Target("ORT custom-op route vs ORT standard route: within 10%", _ort_custom_vs_standard),
    Target(
        f"ORT custom node (io-binding) vs the fused out variant at every op shape: within "
        f"{100 * (ORT_MARGIN - 1):.0f}% (at {DISPATCH_BOUND} each above its floor: ORT's Identity graph, the op's "
        "one-row out call)",
        _ort_custom_vs_out_variant,
    ),
    Target(f"sequence model at its smallest batch, unfused/fused: >= {MODEL_MARGIN}x", _model_small_batch),
    Target(
        "fused residual add + norm vs the add and the fused norm as two calls, in place at every add_norm shape "
        "and allocating where the outputs are heap blocks (fixed-mmap policy: under "
        f"{MMAP_THRESHOLD_BYTES // 1024} KiB): >= {ADD_NORM_SPEEDUP}x up to {CACHE_RESIDENT_COPY}, "
        f">= {ADD_NORM_MEMORY_BOUND_SPEEDUP}x past it",
        _add_norm_vs_separate_add,
    ),
    Target(
        "sequence model with its residual adds folded into the norms vs without, every batch: within "
        f"{100 * (FOLDED_MARGIN - 1):.0f}% (not slower), the interval's upper end",
        _model_with_folded_adds,
    ),
    Target(
        f"fused out variant and call at every op shape, 2 threads vs 1: within {100 * (THREAD_MARGIN - 1):.0f}% "
        "(2 threads never slower)",
        _two_threads_vs_one,
        across_threads=True,
    ),
)


# --- GPU ---------------------------------------------------------------------------

# 64 and 256 MiB in bfloat16: past any L2, HBM-bound
GPU_BANDWIDTH_SHAPES = (shape_label(grid.HBM_BOUND), shape_label(grid.HBM_BOUND_LARGE))
GPU_COPY_SHARE = 0.85  # the best hand-written memory-bound kernels reach about 90% of a copy
LAUNCH_MARGIN = 1.3


def _copy_share_at(dtype: str, shapes: tuple[str, ...], need: float):
    def measure(frame: pd.DataFrame) -> list[Check]:
        checks = []
        for shape in shapes:
            hit = frame[
                (frame.workload == "op")
                & (frame["shape"] == shape)
                & (frame.dtype == dtype)
                & (frame.baseline == "fused")
                & (frame.variant == "call")
            ]
            if len(hit):
                share = float(hit.copy_share.iloc[0])
                checks.append((f"{shape} {100 * share:.0f}% of copy", share >= need))
        return checks

    return measure


def _launch_floor_ratio(variant: str):
    def measure(frame: pd.DataFrame) -> list[Check]:
        hit = frame[
            (frame.workload == "op")
            & (frame["shape"] == DISPATCH_BOUND)
            & (frame.dtype == "float32")
            & (frame.baseline == "fused")
            & (frame.variant == variant)
        ]
        if not len(hit) or pd.isna(hit.vs_launch_floor.iloc[0]):
            return []
        ratio = float(hit.vs_launch_floor.iloc[0])
        return [(f"{DISPATCH_BOUND} fused/{variant} {ratio:.2f}x the floor", ratio <= LAUNCH_MARGIN)]

    return measure


def _faster_than_gpu_peers(frame: pd.DataFrame) -> list[Check]:
    checks = []
    for (shape, dtype), rows in frame[frame.workload == "op"].groupby(["shape", "dtype"], sort=False):
        fused = _median(rows, "op", shape, "fused", "call")
        for peer in ("native", "compiled", "liger"):
            other = _median(rows, "op", shape, peer, "call")
            if fused and other:
                checks.append((f"{shape} {dtype} {peer}/fused {other / fused:.2f}", fused < other))
    return checks


GPU_TARGETS: tuple[Target, ...] = (
    Target(
        f"fused at {' and '.join(GPU_BANDWIDTH_SHAPES)} bfloat16: "
        f">= {100 * GPU_COPY_SHARE:.0f}% of device-to-device copy bandwidth",
        _copy_share_at("bfloat16", GPU_BANDWIDTH_SHAPES, GPU_COPY_SHARE),
    ),
    Target(
        f"fused at {DISPATCH_BOUND} float32 replayed from a CUDA graph: within 30% of an empty kernel's replay",
        _launch_floor_ratio("graph"),
    ),
    Target(
        f"fused at {DISPATCH_BOUND} float32 called from Python: within 30% of an empty kernel's launch",
        _launch_floor_ratio("call"),
    ),
    Target(
        "fused vs F.rms_norm, torch.compile and Liger at every CUDA op shape and dtype: faster", _faster_than_gpu_peers
    ),
)


def _judge(target: Target, rows: pd.DataFrame, prefix: str = "") -> TargetResult:
    checks = target.measure(rows)
    if not checks:
        return TargetResult(prefix + target.name, None, "rows not in this report")
    return _combined(prefix + target.name, [ok for _, ok in checks], "; ".join(text for text, _ in checks))


def _combined(name: str, verdicts: list[bool | None], detail: str) -> TargetResult:
    """Missed if any check missed; inconclusive if none missed and one straddles its bar; else met."""
    if any(v is False for v in verdicts):
        return TargetResult(name, False, detail)
    if any(v is None for v in verdicts):
        return TargetResult(name, None, detail, inconclusive=True)
    return TargetResult(name, True, detail)


def _judge_per_thread_count(target: Target, rows: pd.DataFrame) -> TargetResult:
    """A CPU target judged at every thread count of the report; met only if met at each."""
    counts = sorted(rows.threads.dropna().unique()) if "threads" in rows.columns else []
    if len(counts) <= 1 or target.across_threads:
        return _judge(target, rows)
    parts = [(n, _judge(target, rows[rows.threads == n])) for n in counts]
    measured = [(n, r) for n, r in parts if r.verdict != "not measured"]
    if not measured:
        return TargetResult(target.name, None, "rows not in this report")
    detail = " | ".join(f"{int(n)} thread{'s' if n != 1 else ''}: {r.detail}" for n, r in measured)
    return _combined(target.name, [r.met for _, r in measured], detail)


def _per_layout(frame: pd.DataFrame) -> pd.Series:
    """The rows measured at more than one layout: the op rows and the copies they are held against."""
    return (frame.workload == "op") | ((frame.workload == "limit") & (frame.baseline == "copy"))


def op_layouts(frame: pd.DataFrame) -> list[str]:
    """The layouts of the report's op rows, the headline's first: the natural one where it was measured."""
    if "layout" not in frame.columns:
        return []
    found = list(dict.fromkeys(frame.layout[frame.workload == "op"]))
    return sorted(found, key=lambda layout: layout != NATURAL)


def at_layout(frame: pd.DataFrame, layout: str) -> pd.DataFrame:
    """The report as measured at ``layout``: its op rows and their copies at that layout, the other rows as
    they are (each of them is measured at one layout only)."""
    if "layout" not in frame.columns:
        return frame
    return frame[~_per_layout(frame) | (frame.layout == layout)]


def evaluate_targets(frame: pd.DataFrame, targets: tuple[Target, ...] = TARGETS) -> list[TargetResult]:
    """The CPU targets on the CPU's rows of their dtypes, per thread count, at the headline's layout; the
    copy shares again at each other layout, named by it; then the GPU targets per GPU."""
    if "device" not in frame.columns:
        frame = frame.assign(device="cpu")
    cpu = frame[frame.device == "cpu"]
    layouts = op_layouts(cpu) or [NATURAL]
    headline = at_layout(cpu, layouts[0])
    results = (
        [_judge_per_thread_count(t, headline[headline.dtype.isin(t.dtypes)]) for t in targets]
        if len(cpu) or not len(frame)
        else []
    )
    for layout in layouts[1:]:
        rows = at_layout(cpu, layout)
        for t in (t for t in targets if t.per_layout):
            result = _judge_per_thread_count(t, rows[rows.dtype.isin(t.dtypes)])
            # Named as the GPU targets are by their device (a bracket would read as console markup).
            results.append(replace(result, name=f"layout {layout}: {result.name}"))
    for device in dict.fromkeys(frame.device[frame.device != "cpu"]):
        rows = frame[frame.device == device]
        rows = at_layout(rows, (op_layouts(rows) or [NATURAL])[0])
        results += [_judge(t, rows, f"{device}: ") for t in GPU_TARGETS]
    return results
