"""The readable end of a run: the answer on one screen, and the full table in a file beside the report.

The screen (at most SCREEN_LINES lines): per device, thread count and dtype,
the fused op against each baseline over the op shapes (the geometric mean and
the range, from the report's medians) and its share of the copy, at the
natural layout (inputs as the allocator gives them, as a user's are); the targets'
verdicts; the rows not to trust (their median's interval wider than the run
asked, or other processes busy while they were timed);
what was skipped or failed; where the files are. The full table, every
target's detail and the page-fault rows go to ``<report>.summary.txt``
(``--verbose`` prints them too).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.measure.machine import BUSY_SHARE
from bench.measure.placement import NATURAL
from bench.report.metrics import PAGE_FAULT_BOUND, fault_cost_us, page_fault_bound
from bench.report.targets import VERDICT_MARKUP, TargetResult, at_layout, evaluate_targets, op_layouts
from env.files import write_text_atomic

SCREEN_LINES = 30  # the terminal summary fits one screen
MAX_LISTED = 6  # rows or targets named one per line before the rest are counted
FULL_WIDTH = 250  # the summary file's width: the full table without wrapping
PATH_LINE = "  "  # indents a line that holds a path: never cropped (a cut path cannot be opened)


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def summary_table(frame) -> Table:
    table = Table(
        title="median per call (µs); speed-up = unfused median / this median; % copy: of the fresh-output copy for "
        "allocating calls, of the copy into a preallocated buffer otherwise; PF = page-fault bound",
        show_lines=False,
    )
    for name, justify in (
        ("device", "left"),
        ("workload", "left"),
        ("shape", "left"),
        ("dtype", "left"),
        ("baseline", "left"),
        ("variant", "left"),
        ("layout", "left"),
        ("n", "right"),
        ("median µs", "right"),
        ("p99 µs", "right"),
        ("IQR µs", "right"),
        ("GB/s", "right"),
        ("% copy", "right"),
        ("speed-up", "right"),
        ("setup s", "right"),
        ("faults/call", "right"),
        ("PF", "left"),
    ):
        table.add_column(name, justify=justify)
    bound = page_fault_bound(frame)
    for r, is_bound in zip(frame.itertuples(), bound, strict=True):
        table.add_row(
            r.device,
            r.workload,
            r.shape,
            r.dtype,
            r.baseline,
            r.variant,
            r.layout,
            str(r.n),
            _fmt(r.median_us, ".2f"),
            _fmt(r.p99_us, ".2f"),
            _fmt(r.iqr_us, ".2f"),
            _fmt(r.gbps, ".1f"),
            _fmt(100 * r.copy_share, ".0f"),
            _fmt(r.speedup_vs_unfused, ".2f"),
            _fmt(r.setup_s, ".2f"),
            _fmt(r.minor_faults_per_call, ".0f"),
            f"[yellow]PF {100 * r.page_fault_share:.0f}%[/]" if is_bound else "",
        )
    return table


def page_fault_line(frame) -> str | None:
    """Which rows measure the OS serving fresh pages rather than the code; None when none do."""
    bound = frame[page_fault_bound(frame)]
    if bound.empty:
        return None
    rows = ", ".join(f"{r.baseline}/{r.variant} {r.shape}" for r in bound.itertuples())
    return (
        f"[yellow]{len(bound)} row(s) page-fault bound[/] "
        f"(over {100 * PAGE_FAULT_BOUND:.0f}% of the median serving page faults "
        f"at {fault_cost_us(frame):.2f} µs per fault, measured in this run with x.clone() vs a preallocated copy; "
        f"transparent huge pages: {frame.thp.iloc[0]}; allocator: {frame.cpu_allocator.iloc[0]}): {rows}. "
        "Their time is the OS's: compare them only on the same machine, or use the out variant"
    )


# (baseline, variant) of the comparator, its name on screen, and the fused variant it is held against
HEADLINE: tuple[tuple[str, str, str, str], ...] = (
    ("unfused", "call", "unfused", "call"),
    ("native", "call", "F.rms_norm", "call"),
    ("compiled", "call", "torch.compile", "call"),
    # ORT's own fused node (the standard route, after its graph optimisation) writes into a bound output: the
    # op's out variant is its counterpart
    ("ort", "standard-iobinding", "ORT fused node", "out"),
)


@dataclass(frozen=True)
class Comparison:
    """How many times the fused op is faster than ``name`` at each op shape (other median / fused median)."""

    name: str
    ratios: dict[str, float]

    @property
    def geomean(self) -> float:
        return float(np.exp(np.mean(np.log(list(self.ratios.values())))))


@dataclass(frozen=True)
class Headline:
    """One device, thread count and dtype at one layout: the fused op against each baseline, and its share of
    the copy."""

    device: str
    threads: int
    dtype: str
    comparisons: list[Comparison]
    copy_share: dict[str, float]  # the out variant's share of the copy into a preallocated buffer, per shape
    layout: str = NATURAL


def headlines(frame) -> list[Headline]:
    """The headline of every (device, threads, dtype) that has op rows of the fused op, at the natural layout
    (the report's only one where it has no natural rows)."""
    op = frame[frame.workload == "op"]
    found = []
    for (device, threads, dtype), rows in op.groupby(["device", "threads", "dtype"], sort=False):
        layout = op_layouts(rows)[0]
        rows = at_layout(rows, layout)
        medians = {(r.baseline, r.variant, r.shape): float(r.median_us) for r in rows.itertuples()}
        shapes = list(dict.fromkeys(rows["shape"]))
        comparisons = []
        for baseline, variant, name, fused_variant in HEADLINE:
            ratios = {
                shape: medians[(baseline, variant, shape)] / medians[("fused", fused_variant, shape)]
                for shape in shapes
                if (baseline, variant, shape) in medians and ("fused", fused_variant, shape) in medians
            }
            if ratios:
                comparisons.append(Comparison(name, ratios))
        out = rows[(rows.baseline == "fused") & (rows.variant == "out") & rows.copy_share.notna()]
        if comparisons or len(out):
            share = {r.shape: float(r.copy_share) for r in out.itertuples()}
            found.append(Headline(str(device), int(threads), str(dtype), comparisons, share, str(layout)))
    return found


def _range(values: dict[str, float], spec: str, unit: str) -> str:
    low, high = min(values, key=values.get), max(values, key=values.get)
    return f"{format(values[low], spec)}{unit} ({low}) to {format(values[high], spec)}{unit} ({high})"


def headline_lines(headline: Headline) -> list[str]:
    where = "" if headline.layout == NATURAL else f", layout {headline.layout}"
    lines = [f"[bold]{headline.device}[/], {headline.threads} thread(s), {headline.dtype}{where}: fused op faster than"]
    for c in headline.comparisons:
        lines.append(f"  {c.name:<15} {c.geomean:6.2f}x  (geo-mean; over shapes {_range(c.ratios, '.2f', 'x')})")
    if headline.copy_share:
        share = {k: 100 * v for k, v in headline.copy_share.items()}
        lines.append(f"  copy share      out variant {_range(share, '.0f', '%')} of the copy into a buffer")
    return lines


def untrusted_rows(frame) -> list[str]:
    """Rows not to trust: their median's interval wider than the run asked (they hit the time cap first), or
    timed while other processes used more than BUSY_SHARE of the CPU (re-run them on a quiet machine)."""
    found = []
    for r in frame.itertuples():
        why = []
        width = (r.median_hi_us - r.median_lo_us) / 2 / r.median_us if r.median_us > 0 else math.nan
        if not math.isnan(r.precision_target) and width > r.precision_target:
            why.append(f"interval +-{100 * width:.1f}% (asked +-{100 * r.precision_target:g}%)")
        if r.other_cpu_share > BUSY_SHARE:
            why.append(f"other processes {100 * r.other_cpu_share:.0f}%")
        if why:
            layout = "" if r.layout == NATURAL else f" {r.layout}"
            found.append(f"{r.workload} {r.shape} {r.dtype}{layout} {r.baseline}/{r.variant}: {', '.join(why)}")
    return found


def _listed(lines: list[str], limit: int) -> list[str]:
    return lines if len(lines) <= limit else lines[: limit - 1] + [f"  ... and {len(lines) - limit + 1} more"]


def _verdict(target) -> str:
    return VERDICT_MARKUP[target.verdict]


def summary_path(csv: Path | str) -> Path:
    """``<report>.summary.txt``: the full table, every target's detail, the page-fault rows."""
    csv = Path(csv)
    return csv.with_name(csv.with_suffix("").name + ".summary.txt")


def print_full(outcome, console: Console, targets: list[TargetResult] | None = None) -> None:
    """The full table, every target with its detail, the page-fault rows, what was skipped or failed.

    ``targets``: the frame's targets as evaluate_targets judged them already (None: judged here)."""
    if outcome.frame is not None:
        console.print(summary_table(outcome.frame))
        targets = evaluate_targets(outcome.frame) if targets is None else targets
        if targets:
            console.print(
                "[bold]targets[/] (ratios within this run and device; CPU: fp32 rows; at the natural layout unless "
                "one is named)"
            )
            for target in targets:
                console.print(f"  {_verdict(target)}  {target.name}: {target.detail}")
        faults = page_fault_line(outcome.frame)
        if faults:
            console.print(faults, highlight=False)
        for line in untrusted_rows(outcome.frame):
            console.print(f"[yellow]untrusted[/] {line}")
    for line in outcome.skipped:
        console.print(f"[yellow]skipped[/] {line}")
    for line in outcome.failures:
        console.print(f"[red bold]FAILED[/] {line}")


def full_text(outcome, targets: list[TargetResult] | None = None) -> str:
    console = Console(file=io.StringIO(), width=FULL_WIDTH, record=True, color_system=None)
    print_full(outcome, console, targets)
    return console.export_text()


def sampled_seconds(frame) -> float:
    """Seconds the report's samples took: each row's samples of ``block`` calls at their mean time. The rest of a
    run is set-up, warm-up, the verified calls, inputs and references, and starting the processes."""
    return float((frame["n"] * frame["block"] * frame["mean_us"]).sum() / 1e6)


def screen_lines(outcome, full: Path | None, targets: list[TargetResult] | None = None) -> list[str]:
    """The one-screen summary, as rich markup lines: never more than SCREEN_LINES (``targets`` as print_full)."""
    lines: list[str] = []
    frame = outcome.frame
    if frame is not None:
        for headline in headlines(frame):
            lines += headline_lines(headline)
        targets = evaluate_targets(frame) if targets is None else targets
        if targets:
            counted = {v: sum(_verdict(t) == v for t in targets) for v in dict.fromkeys(map(_verdict, targets))}
            lines.append("[bold]targets[/]: " + ", ".join(f"{n} {v}" for v, n in counted.items()))
            lines += _listed([f"  {_verdict(t)}  {t.name}" for t in targets if t.met is not True], MAX_LISTED)
            lines.append("  (each with its interval in the summary file)")
        untrusted = untrusted_rows(frame)
        if untrusted:
            lines.append(
                f"[yellow]{len(untrusted)} row(s) not to trust[/] (interval wider than asked, or other processes "
                f"above {100 * BUSY_SHARE:.0f}% of the CPU: re-run on a quiet machine):"
            )
            lines += _listed([f"  {line}" for line in untrusted], 3)
    if outcome.skipped:
        lines.append(
            f"[yellow]{len(outcome.skipped)} skipped[/]: {outcome.skipped[0]}" + (" ..." * (len(outcome.skipped) > 1))
        )
    lines += _listed([f"[red bold]FAILED[/] {line}" for line in outcome.failures], 3)
    if outcome.paths is not None:
        lines.append(
            "files: the report (with .samples.npz and .png beside it) and the full table (--verbose prints it)"
        )
        lines.append(f"{PATH_LINE}{outcome.paths.csv}")
    if full is not None:
        lines.append(f"{PATH_LINE}{full}")
    sampled = "" if frame is None else f" (the timed samples {sampled_seconds(frame):.0f} s of it)"
    lines.append(
        f"{outcome.seconds:.0f} s{sampled}; "
        + (f"[red]{len(outcome.failures)} failure(s)[/]" if outcome.failures else "no failures")
    )
    return (
        lines
        if len(lines) <= SCREEN_LINES
        else lines[: SCREEN_LINES - 4] + ["  ... (the rest in the summary file)"] + lines[-3:]
    )


def print_summary(outcome, console: Console, verbose: bool = False) -> None:
    """Write the full summary beside the report, print it where ``verbose``, then the one-screen summary."""
    full = None
    # Judged once for the file, the screen and --verbose: 0.8 s a full report, paid by every process's record too.
    targets = evaluate_targets(outcome.frame) if outcome.frame is not None else []
    if outcome.paths is not None:
        full = write_text_atomic(summary_path(outcome.paths.csv), full_text(outcome, targets))
    if verbose:
        print_full(outcome, console, targets)
    paths = {f"{PATH_LINE}{path}" for path in (outcome.paths.csv if outcome.paths else None, full) if path}
    for line in screen_lines(outcome, full, targets):
        if line in paths:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        else:
            console.print(line, no_wrap=True, overflow="ellipsis", highlight=False)
