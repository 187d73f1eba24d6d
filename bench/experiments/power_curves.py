"""P(REGRESSION) against the true slowdown, for the three comparisons, simulated and measured.

    python -m bench.experiments.power_curves [--runs 400] [--out reports/power_curves]

The three comparisons:
  * quick A/B   `bench --quick --against REF`: 10 pairs of processes, Yuen's
                interval of the trimmed mean, two stages (bench/ab/driver.py);
  * full A/B    the same with 12 pairs, over the full grid's counted rows;
  * separate    two full reports (3 processes each) held against each other with
                `bench.compare`: unpaired, moderated variances.
Each simulated run draws every counted row's noise from committed
measurements (bench/experiments/calibration.py) and judges it with the
product's own functions (bench/compare.py, bench/stats), so a change of the
rules changes these curves. Rows the slowdown touches are the fused op's rows
(4 in the quick grid, 10 in the full one); the rest are unchanged, so any
REGRESSION among them is a false alarm.

Measured points come from the `measured.csv` files that
bench/experiments/power_measure.py wrote (runs on a quiet machine; one folder
per suspect bound, MEASURED_FOLDERS), from the A/A and slowdown runs that
`invoke bench.ab-measure` recorded (their op rows' intervals judged again by
the current verdict), and from pairs of separate quick reports of one commit
judged with their fused op rows made slower (bench/experiments/aa_reports.py:
the machine's own noise under a shifted mean). The CSV marks each point's
source; the plot draws simulated points hollow.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.ab import driver as ab
from bench.experiments.calibration import ReportNoise, pair_spreads, report_noise
from bench.experiments.rows import OP_BASELINE, OP_WORKLOAD
from bench.stats import compare, stages
from bench.stats.moderated import fit_prior, squeeze
from bench.stats.verdicts import DEFAULT_THRESHOLD, REGRESSION, verdict_of
from env.paths import reports_dir

SLOWDOWNS_PCT = (0, 2, 3, 5, 10, 20)
# The A/B run's own stage design (bench/ab/driver.py), so a change of it changes these curves.
FIRST_STAGE_SHARE = 1 - stages.CONFIRM_ALPHA_SHARE
CONFIRM_PAIRS = ab.CONFIRM_PROCESSES
# One pair in about fifteen sits 15-40 % off on a row whose other pairs agree within a few per cent (an A/A
# run of 10 pairs on the development VM: 16 of 32 counted rows had a pair more than 15 % off the row's
# median, so P(a pair is odd) = 1 - 0.5 ** (1 / 10)).
ODD_PAIR_RATE = 1 - 0.5 ** (1 / 10)
ODD_PAIR_SIZE = (0.15, 0.40)
AB_MEASURE = reports_dir() / "ab_measure"
SAME_CPU_RESULTS = AB_MEASURE / "epyc-same-cpu" / "results.csv"  # the turn-taking design on one CPU
FULL_REPORT = reports_dir() / "baseline" / "cpu-all.csv"
QUICK_REPORT = reports_dir() / "baseline" / "cpu-quick.csv"


@dataclass(frozen=True)
class AbDesign:
    name: str
    pairs: int
    counted_rows: int
    op_rows: int


def _pairs(rng, slowdown_log: float, spread: float, n: int) -> np.ndarray:
    """Log ratios of n pairs of one row: the slowdown, the row's pair spread, and an odd pair now and then."""
    diffs = slowdown_log + rng.normal(0.0, spread, n)
    odd = rng.random(n) < ODD_PAIR_RATE
    diffs[odd] += rng.choice([-1.0, 1.0], odd.sum()) * rng.uniform(*ODD_PAIR_SIZE, odd.sum())
    return diffs


def _judge_paired(diffs: np.ndarray, alpha: float, rng) -> tuple[str, float]:
    interval = compare.log_interval(np.ones(len(diffs)), np.exp(diffs), True, alpha, rng)
    return verdict_of(interval.ratio, interval.low, interval.high, DEFAULT_THRESHOLD), interval.ratio


def simulate_ab(design: AbDesign, spreads: np.ndarray, slowdown: float, runs: int, rng, alpha=0.05) -> dict:
    """One A/B design's runs: both stages, as bench/ab/driver.py judges them."""
    first_alpha = alpha * FIRST_STAGE_SHARE / design.counted_rows
    flagged_op, all_op, false_runs = 0, 0, 0
    bound = 1 + DEFAULT_THRESHOLD * compare.SUSPECT_BOUND_SHARE  # a suspect's estimate lies past it
    for _ in range(runs):
        row_spreads = rng.choice(spreads, design.counted_rows)
        truth = [math.log1p(slowdown) if r < design.op_rows else 0.0 for r in range(design.counted_rows)]
        verdicts, suspects = [], []
        for row, (true, spread) in enumerate(zip(truth, row_spreads, strict=True)):
            verdict, ratio = _judge_paired(_pairs(rng, true, spread, design.pairs), first_alpha, rng)
            verdicts.append(verdict)
            if verdict == compare.INCONCLUSIVE and not (1 / bound <= ratio <= bound):
                suspects.append(row)
        for row in suspects:  # measured again in fresh pairs, judged alone over the suspects' family
            second_alpha = alpha * (1 - FIRST_STAGE_SHARE) / len(suspects)
            diffs = _pairs(rng, truth[row], row_spreads[row], CONFIRM_PAIRS)
            verdicts[row] = _judge_paired(diffs, second_alpha, rng)[0]
        op = [v == REGRESSION for v in verdicts[: design.op_rows]]
        flagged_op += sum(op)
        all_op += all(op)
        false_runs += any(v == REGRESSION for v in verdicts[design.op_rows :])
    return {
        "p_regression_op_row": flagged_op / (runs * design.op_rows),
        "p_every_op_row": all_op / runs,
        "p_false_alarm_run": false_runs / runs,
    }


def simulate_separate(
    noise: ReportNoise, kinds: list[str], op_rows: int, slowdown: float, runs: int, rng, units: int | None = None
) -> dict:
    """Two separate full reports compared unpaired with moderated variances, as `bench.compare` does.

    ``units``: processes per report (default: the calibrating report's), each as noisy as its processes were.
    """
    rows, units = noise.rows, units or noise.units
    alpha = 0.05 / rows
    flagged_op, all_op, false_runs, covered, covered_family = 0, 0, 0, 0, 0
    for _ in range(runs):
        # Each row's true variance: one of the measured rows' (resampled), so the rows' scatter is the report's.
        true_var = rng.choice(np.array(noise.variances), rows)
        truth = np.array([math.log1p(slowdown) if r < op_rows else 0.0 for r in range(rows)])
        base = rng.normal(0.0, np.sqrt(true_var)[:, None], (rows, units))
        new = truth[:, None] + rng.normal(0.0, np.sqrt(true_var)[:, None], (rows, units))
        pooled = [compare.pooled_log_variance(b, n) for b, n in zip(base, new, strict=True)]
        priors = {}
        for kind in set(kinds):
            members = [i for i, k in enumerate(kinds) if k == kind]
            priors[kind] = fit_prior(
                np.array([pooled[i][0] for i in members]), np.array([pooled[i][1] for i in members])
            )
        verdicts, all_covered = [], True
        for r in range(rows):
            variance, dof = squeeze(*pooled[r], priors[kinds[r]])
            estimate = float(new[r].mean() - base[r].mean())
            se = math.sqrt(variance * 2 / units)
            interval = compare.student_interval(estimate, se, dof, alpha)
            verdicts.append(verdict_of(interval.ratio, interval.low, interval.high, DEFAULT_THRESHOLD))
            nominal = compare.student_interval(estimate, se, dof, 0.05)  # per-row 95 %: its coverage
            covered += math.log(nominal.low) <= truth[r] <= math.log(nominal.high)
            all_covered &= math.log(interval.low) <= truth[r] <= math.log(interval.high)
        covered_family += all_covered
        op = [v == REGRESSION for v in verdicts[:op_rows]]
        flagged_op += sum(op)
        all_op += all(op)
        false_runs += any(v == REGRESSION for v in verdicts[op_rows:])
    return {
        "p_regression_op_row": flagged_op / (runs * op_rows),
        "p_every_op_row": all_op / runs,
        "p_false_alarm_run": false_runs / runs,
        "coverage_95_per_row": covered / (runs * rows),
        "coverage_family": covered_family / runs,
    }


def _counted_kinds(report_csv: Path) -> tuple[list[str], int]:
    """The counted rows' kinds (workload, device), fused op rows first, and how many fused op rows there are."""
    frame = compare.read_report(report_csv)
    counted = frame[~frame.workload.isin([compare.LIMIT_WORKLOAD, "serve"])]
    is_op = (counted.workload == OP_WORKLOAD) & (counted.baseline == OP_BASELINE)
    ordered = pd.concat([counted[is_op], counted[~is_op]])
    return [f"{w}/{d}" for w, d in zip(ordered.workload, ordered.device, strict=True)], int(is_op.sum())


def recorded_points(results_csv: Path) -> list[dict]:
    """The op rows of recorded `bench.ab-measure` runs judged again by the current verdict from their intervals."""
    runs = pd.read_csv(results_csv)
    points = []
    for kind, group in runs.groupby("kind", sort=False):
        intervals = [
            (float(r), float(lo), float(hi))
            for text in group.op_rows_intervals.dropna()
            for _, shape, r, lo, hi in _op_intervals(text)
            if shape != "1x32x128"  # the model row: the op is a few per cent of it
        ]
        flagged = [verdict_of(r, lo, hi, DEFAULT_THRESHOLD) == REGRESSION for r, lo, hi in intervals]
        slowdown = 0 if kind == "aa" else int(kind.removeprefix("slow"))
        points.append(
            {
                "comparison": "quick A/B",
                "slowdown_pct": slowdown,
                "source": f"measured ({results_csv.parent.name}, op rows re-judged from recorded intervals)",
                "runs": len(group),
                "p_regression_op_row": float(np.mean(flagged)),
                "p_every_op_row": math.nan,
                "p_false_alarm_run": math.nan,
            }
        )
    return points


def _op_intervals(text: str):
    from bench.experiments.calibration import OP_ROW_INTERVAL

    return OP_ROW_INTERVAL.findall(text)


def simulate_all(runs: int, seed: int = 0, report_units: tuple[int, ...] = (3, 6)) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spreads = pair_spreads([SAME_CPU_RESULTS])
    quick_kinds, quick_op = _counted_kinds(QUICK_REPORT)
    full_kinds, full_op = _counted_kinds(FULL_REPORT)
    designs = [
        AbDesign("quick A/B", 10, len(quick_kinds), quick_op),
        AbDesign("full A/B", 12, len(full_kinds), full_op),
    ]
    noise = report_noise(FULL_REPORT)
    lines = []
    for pct in SLOWDOWNS_PCT:
        for design in designs:
            found = simulate_ab(design, spreads, pct / 100, runs, rng)
            lines.append({"comparison": design.name, "slowdown_pct": pct, "source": "simulated", "runs": runs, **found})
        for units in report_units:
            found = simulate_separate(noise, full_kinds, full_op, pct / 100, runs, rng, units)
            name = f"separate full reports, {units} processes"
            lines.append({"comparison": name, "slowdown_pct": pct, "source": "simulated", "runs": runs, **found})
    frame = pd.DataFrame(lines)
    frame.attrs["calibration"] = {
        "pair_spread_median": float(np.median(spreads)),
        "pair_spreads": len(spreads),
        "report_prior_dof": noise.prior.dof,
        "report_prior_sd": math.sqrt(noise.prior.variance),
        "report_rows": noise.rows,
    }
    return frame


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(11, 4.5))
    names = list(dict.fromkeys(frame.comparison))
    for index, name in enumerate(names):
        color = f"C{index}"
        mine = frame[frame.comparison == name]
        simulated = mine[mine.source == "simulated"]
        if len(simulated):
            axis.plot(
                simulated.slowdown_pct,
                simulated.p_regression_op_row,
                "o--",
                color=color,
                mfc="none",
                label=f"{name} (simulated)",
            )
        measured = mine[mine.source != "simulated"]
        if len(measured):
            source = measured.source.iloc[0].split(" (")[0]
            axis.plot(measured.slowdown_pct, measured.p_regression_op_row, "s", color=color, label=f"{name} ({source})")
    axis.axhline(0.8, color="grey", lw=0.8)
    axis.axhline(0.05, color="grey", lw=0.8)
    axis.set_xlabel("true slowdown of the fused op's rows (%)")
    axis.set_ylabel("P(REGRESSION) per op row")
    axis.set_title(f"power at the {100 * DEFAULT_THRESHOLD:g}% threshold, 95% family-wise")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: it hid the points
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# Measured points by folder (under the output folder) and what their comparison is called in the curves: the
# quick A/B runs under each suspect bound (power_measure.py), and pairs of separate quick reports of one commit
# whose fused op rows were made slower in the judging (aa_reports.py: this machine's noise, a shifted mean).
EARLIER_BOUND = "quick A/B, suspects past the threshold (earlier rule)"
MEASURED_FOLDERS = {".": {"quick A/B": EARLIER_BOUND}, "suspect_bound": {}}
SHIFTED_FOLDERS = {
    "separate_quick": "separate quick reports, 3 processes, shifted",
    "separate_quick6": "separate quick reports, 6 processes, shifted",
}


def measured_points(out: Path) -> pd.DataFrame:
    """Every measured point under ``out``, named as the curves name them."""
    frames = []
    for folder, names in MEASURED_FOLDERS.items():
        path = out / folder / "measured.csv"
        if path.is_file():
            frame = pd.read_csv(path)
            frames.append(frame.assign(comparison=frame.comparison.replace(names)))
    for folder, name in SHIFTED_FOLDERS.items():
        shifted = out / folder / "shifted_power_summary.csv"
        if not shifted.is_file():
            continue
        summary = pd.read_csv(shifted)
        frames.append(
            pd.DataFrame(
                {
                    "comparison": name,
                    "slowdown_pct": summary.slowdown_pct,
                    "source": "measured noise",
                    "runs": summary.pairs,
                    "p_regression_op_row": summary.p_regression_op_row,
                    "p_false_alarm_run": summary.p_false_alarm_pair,
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def replot(out: Path) -> None:
    """power.csv with the measured points taken in again, and its plot."""
    frame = pd.read_csv(out / "power.csv")
    simulated = frame[frame.source == "simulated"]
    recorded = frame[frame.source.str.startswith("measured (")]  # the ab_measure runs judged again
    frame = pd.concat([simulated, recorded, measured_points(out)], ignore_index=True)
    frame.to_csv(out / "power.csv", index=False, float_format="%.4f")
    plot(frame, out / "power.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=400, help="simulated runs per point (default 400)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--report-units",
        default="3,6",
        help="processes per separate full report to simulate, a comma list (default 3,6)",
    )
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves")
    parser.add_argument(
        "--replot", action="store_true", help="no simulation: power.csv with measured.csv's points again, and its plot"
    )
    args = parser.parse_args(argv)
    if args.replot:
        replot(args.out)
        return
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    units = tuple(int(u) for u in args.report_units.split(",") if u.strip())
    if not units or min(units) < 2:
        parser.error(f"--report-units needs integers >= 2, got {args.report_units!r}")
    frame = simulate_all(args.runs, args.seed, units)
    recorded = pd.DataFrame(recorded_points(SAME_CPU_RESULTS))
    calibration = frame.attrs["calibration"]
    frame = pd.concat([frame, recorded, measured_points(args.out)], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "power.csv", index=False, float_format="%.4f")
    pd.Series(calibration).to_csv(args.out / "calibration.csv", header=["value"])
    plot(frame, args.out / "power.png")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(calibration)


if __name__ == "__main__":
    main()
