"""How an A/B run's alpha is best split between its two stages, judged on recorded runs.

    python -m bench.experiments.confirm_share [--runs reports/power_curves/measured_runs.csv]
        [--shares 0.2,0.3,0.4,0.5,0.6,0.7] [--bound-share 1.0] [--out reports/power_curves/confirm_share]

An A/B run spends its family-wise alpha in two stages (bench/stats/stages.py,
CONFIRM_ALPHA_SHARE): every row on the first pairs, then the suspects (rows left
INCONCLUSIVE with their estimate past the threshold) in fresh pairs, judged
alone. The share given to the second stage trades the first stage's intervals
against the confirmation's. This re-judges the quick A/B runs that measured the
power curves (their folders are in ``measured_runs.csv``; the pooled reports of
both stages are kept there) at each share, with this checkout's statistics and
the suspect bound the runs were measured with (``--bound-share``: 1.0, the
threshold itself; the product now takes half of it, SUSPECT_BOUND_SHARE).

The recorded confirmation measured the suspects of the share the run used. A
row that another share leaves a suspect but that was not measured again cannot
be confirmed from the recording: it is counted as not flagged, and it still
counts in the second stage's family (bench/stats/stages.py: its alpha is spread
as the real run would spread it). The power read here is therefore a lower bound at shares
other than the recorded one, and the false alarms are those of the recorded
pairs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.experiments.rows import is_op_row
from bench.stats import compare, stages
from env.paths import reports_dir

DEFAULT_SHARES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
RECORDED_BOUND_SHARE = 1.0  # the suspect bound the recorded runs were measured with: the threshold itself


@dataclass(frozen=True)
class Judged:
    op_rows: int
    op_flagged: int
    other_flagged: int
    unmeasured_suspects: int
    confirmed_op_rows: int


def judge_at_share(
    folder: Path, share: float, threshold: float, alpha: float, bound_share: float = RECORDED_BOUND_SHARE
) -> Judged:
    """A recorded quick A/B run's verdicts with ``share`` of ``alpha`` given to the confirmation."""
    judged = stages.judge_folder(folder, threshold, alpha, share, bound_share)
    op_rows = [r for r in judged.comparison.rows if is_op_row(r.key)]
    others = [r for r in judged.comparison.rows if r.key[0] != compare.LIMIT_WORKLOAD and r not in op_rows]
    return Judged(
        op_rows=len(op_rows),
        op_flagged=sum(r.verdict == compare.REGRESSION for r in op_rows),
        other_flagged=sum(r.verdict == compare.REGRESSION for r in others),
        unmeasured_suspects=len(judged.suspects) - len(judged.measured_again),
        confirmed_op_rows=sum(r.confirmed for r in op_rows),
    )


def rejudge(
    runs: pd.DataFrame, shares: tuple[float, ...], threshold: float, alpha: float, bound_share: float
) -> pd.DataFrame:
    """One line per recorded quick A/B run and share."""
    lines = []
    quick = runs[runs.comparison == "quick A/B"]
    for share in shares:
        for run in quick.itertuples():
            judged = judge_at_share(Path(run.folder), share, threshold, alpha, bound_share)
            lines.append({"share": share, "slowdown_pct": run.slowdown_pct, "run": run.run, **judged.__dict__})
    return pd.DataFrame(lines)


def summarise(lines: pd.DataFrame) -> pd.DataFrame:
    """Per share and slowdown: the share of op rows flagged, and the runs with any row flagged."""
    groups = lines.groupby(["share", "slowdown_pct"])
    return pd.DataFrame(
        {
            "runs": groups.size(),
            "p_regression_op_row": groups.op_flagged.sum() / groups.op_rows.sum(),
            "runs_any_row_flagged": groups.apply(lambda g: int(((g.op_flagged + g.other_flagged) > 0).sum())),
            "unmeasured_suspects": groups.unmeasured_suspects.sum(),
        }
    ).reset_index()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=reports_dir() / "power_curves" / "measured_runs.csv")
    parser.add_argument("--shares", default=",".join(map(str, DEFAULT_SHARES)))
    parser.add_argument("--threshold", type=float, default=compare.DEFAULT_THRESHOLD)
    parser.add_argument("--alpha", type=float, default=compare.DEFAULT_ALPHA)
    parser.add_argument("--bound-share", type=float, default=RECORDED_BOUND_SHARE)
    parser.add_argument("--out", type=Path, default=reports_dir() / "power_curves" / "confirm_share")
    args = parser.parse_args(argv)
    runs = pd.read_csv(args.runs)
    missing = [f for f in runs.folder if not Path(f).is_dir()]
    if missing:
        raise SystemExit(f"the recorded runs are not on this machine (first: {missing[0]})")
    shares = tuple(float(s) for s in args.shares.split(","))
    lines = rejudge(runs, shares, args.threshold, args.alpha, args.bound_share)
    summary = summarise(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    lines.to_csv(args.out / "runs.csv", index=False)
    summary.to_csv(args.out / "summary.csv", index=False)
    print(summary.to_string(index=False))


if __name__ == "__main__":
    main()
