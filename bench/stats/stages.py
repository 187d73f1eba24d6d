"""An A/B run's two stages, judged again from the pooled reports its folder keeps.

A run (bench/ab/driver.py) spends its family-wise alpha in two stages: the first
judges every row at ``alpha * (1 - share)``; the rows it leaves suspects
(compare.suspects) are measured again in fresh pairs, whose pooled reports sit in
the folder's ``confirm/``, and judged on those pairs alone at ``alpha * share``
over the family of the suspects. This re-reads both from disk, with this
checkout's rules: the gate's acceptance of a finished run, the power studies'
re-judging of recorded runs at other shares and bounds.

A suspect the folder did not measure again (a run from before the second stage
measured every suspect, or one re-judged at another share or bound than it ran
with) keeps the first stage's verdict and still takes its part of the second
stage's alpha, as the run would have spread it. For a run judged at its own share
and bound every suspect was measured again, and the verdicts are the run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.report.schema import read_report
from bench.stats import compare

# The second stage's part of a run's alpha (bench/ab/driver.py says how it was chosen).
CONFIRM_ALPHA_SHARE = 0.2


@dataclass(frozen=True)
class Stages:
    comparison: compare.Comparison  # both stages' verdicts
    suspects: list[compare.Key]  # the rows the first stage left to measure again
    measured_again: list[compare.Key]  # those of them the folder's confirmation measured


def pooled_reports(folder: Path) -> tuple[Path, Path]:
    """A stage's pooled reports, BASE and NEW."""
    return folder / "base" / "pooled.csv", folder / "new" / "pooled.csv"


def judge_folder(
    folder: Path,
    threshold: float,
    alpha: float = compare.DEFAULT_ALPHA,
    share: float = CONFIRM_ALPHA_SHARE,
    bound_share: float = compare.SUSPECT_BOUND_SHARE,
) -> Stages:
    """A finished A/B run in ``folder`` judged in both stages (``share`` of ``alpha`` to the second)."""
    if not 0 < share < 1:
        raise ValueError(f"share must be between 0 and 1, got {share}")
    first = compare.compare_reports(*pooled_reports(folder), threshold, alpha * (1 - share), paired=True)
    suspects = compare.suspects(first, threshold, bound_share) if not first.machine_differences else []
    again = pooled_reports(folder / "confirm")
    recorded = set(compare.row_keys(read_report(again[0]))) if all(p.is_file() for p in again) else set()
    measured = [k for k in suspects if k in recorded]
    if not measured:
        return Stages(first, suspects, measured)
    # compare_reports spreads its alpha over ``only``: so each measured suspect gets alpha * share / suspects.
    second_alpha = alpha * share * len(measured) / len(suspects)
    second = compare.compare_reports(*again, threshold, second_alpha, paired=True, only=measured)
    return Stages(compare.with_confirmed(first, second), suspects, measured)
