"""The noise the power simulations draw from, read from committed measurements.

* Paired A/B rows: the A/A runs of `invoke bench.ab-measure` record each op
  row's first-stage interval, ratio [low, high], at 1 - 0.04/32 per row over
  10 pairs trimmed to 8 (Yuen's interval, 7 degrees of freedom). Its
  half-width is q * se, and Yuen's se is sqrt(9 s_w^2 / 56) for the
  winsorized spread s_w of the pairs' log ratios, so each recorded interval
  gives one row's pair spread s_w = se * sqrt(56 / 9).
* Separate reports: a full report holds 3 process units a row; the
  variances of the log unit values of its counted rows (2 degrees of freedom
  each) are fitted with the moderated model's prior (bench/stats/moderated.py):
  d0 and s0^2 describe how the rows' process-level variances scatter. A d0
  below 2 (a scatter with an infinite mean) cannot be drawn from, so the
  simulations resample the measured variances themselves.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from bench.report.schema import read_report, read_samples, row_key
from bench.stats.compare import LIMIT_WORKLOAD, unit_medians
from bench.stats.moderated import Prior, fit_prior

# The design the recorded A/A intervals were measured under (bench/ab.py at the time): first-stage alpha
# 0.8 * 0.05 over 32 counted rows, 10 pairs, 10 % trimmed from each end.
RECORDED_ROW_ALPHA = 0.04 / 32
RECORDED_PAIRS, RECORDED_KEPT = 10, 8
OP_ROW_INTERVAL = re.compile(r"(call|out) (\S+) ([\d.]+) \[([\d.]+), ([\d.]+)\]")


def pair_spreads(results_csvs: list[Path]) -> np.ndarray:
    """The pair spread s_w (log ratio) of every op row of every A/A run recorded in these results files."""
    q = float(student_t.ppf(1 - RECORDED_ROW_ALPHA / 2, RECORDED_KEPT - 1))
    factor = math.sqrt(RECORDED_KEPT * (RECORDED_KEPT - 1) / (RECORDED_PAIRS - 1))
    spreads = []
    for csv in results_csvs:
        runs = pd.read_csv(csv)
        for text in runs.loc[runs.kind == "aa", "op_rows_intervals"].dropna():
            for _, _, _, low, high in OP_ROW_INTERVAL.findall(text):
                se = (math.log(float(high)) - math.log(float(low))) / (2 * q)
                spreads.append(se * factor)
    return np.array(spreads)


@dataclass(frozen=True)
class ReportNoise:
    prior: Prior  # how the counted rows' process-level variances scatter (their moderated prior)
    rows: int  # counted rows
    units: int  # process units a row
    variances: tuple[float, ...] = ()  # each counted row's variance of its log unit values, as measured


def report_noise(report_csv: Path) -> ReportNoise:
    """The process-level variance of a full report's counted rows, fitted by the moderated model."""
    frame, samples = read_report(report_csv), read_samples(report_csv)
    variances, dofs, units = [], [], []
    for record in frame.to_dict("records"):
        key = tuple(row_key(record))
        if key[0] in (LIMIT_WORKLOAD, "serve"):
            continue
        logs = np.log(list(unit_medians(samples[key]).values()))
        if len(logs) >= 2:
            variances.append(float(np.var(logs, ddof=1)))
            dofs.append(len(logs) - 1)
            units.append(len(logs))
    prior = fit_prior(np.array(variances), np.array(dofs))
    return ReportNoise(prior, len(variances), int(np.median(units)), tuple(variances))
