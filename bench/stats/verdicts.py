"""A row's verdict from its ratio and interval, and the slowdown it would catch.

Significance and relevance are separate questions. The family-wise interval
says whether NEW differs from BASE at all (it excludes 1); the threshold says
whether the difference matters (the estimate lies beyond it). A verdict that
needed the whole interval beyond the threshold would call a change of exactly
the threshold REGRESSION only half the time, and a change of twice the
threshold only where the interval is narrower than the threshold: a gate at 10 %
let a 10 % slowdown pass.

  REGRESSION    the interval lies above 1 and the estimate above 1 + t;
  IMPROVEMENT   the interval lies below 1 and the estimate below 1 / (1 + t);
  SAME          the whole interval lies within [1 / (1 + t), 1 + t];
  INCONCLUSIVE  anything else (a significant change smaller than t is SAME
                only when its interval says so, else INCONCLUSIVE).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import roots_genlaguerre
from scipy.stats import norm
from scipy.stats import t as student_t

REGRESSION, IMPROVEMENT, SAME, INCONCLUSIVE = "REGRESSION", "IMPROVEMENT", "SAME", "INCONCLUSIVE"
DEFAULT_THRESHOLD = 0.03  # the practical threshold: a change smaller than 3 % is not called a regression
POWER = 0.80  # the probability at which detectable_80 is quoted
LAGUERRE_NODES = 96  # the power's integral over the estimated standard error: within 1e-3 of adaptive quadrature
EXACT_SE_DOF = 300  # past this many degrees of freedom the standard error is taken as known (and Gamma overflows)


def verdict_of(ratio: float, low: float, high: float, threshold: float) -> str:
    """The verdict of a ratio NEW / BASE with its family-wise interval [low, high] at threshold ``threshold``."""
    if low > 1 and ratio > 1 + threshold:
        return REGRESSION
    if high < 1 and ratio < 1 / (1 + threshold):
        return IMPROVEMENT
    if low >= 1 / (1 + threshold) and high <= 1 + threshold:
        return SAME
    return INCONCLUSIVE


def power_of(slowdown_log: float, se: float, dof: float, alpha: float, threshold: float) -> float:
    """P(REGRESSION) of a row whose true log ratio is ``slowdown_log``, at standard error ``se`` on ``dof``.

    The row is flagged when its log estimate exceeds both q * s (the
    interval's lower bound above 0; q the t quantile at 1 - alpha/2, s the
    estimated standard error) and log(1 + t). The estimate is normal around the
    true log ratio with standard deviation ``se``; s^2 is se^2 chi2(dof) / dof,
    independent of it. So the power is the integral over s of
    Phi((d - max(q s, log(1 + t))) / se), the noncentral t's tail where only the
    interval counts.
    """
    if not se > 0:
        return float(slowdown_log > math.log1p(threshold))
    q, c = float(student_t.ppf(1 - alpha / 2, dof)), math.log1p(threshold)
    if dof > EXACT_SE_DOF:  # the standard error is as good as known
        return float(norm.cdf((slowdown_log - max(q * se, c)) / se))
    # u = dof s^2 / se^2 is chi-square on dof; with u = 2x the integral is one of Gauss-Laguerre's forms.
    nodes, weights = _laguerre(float(dof))
    s = se * np.sqrt(2 * nodes / dof)
    given = norm.cdf((slowdown_log - np.maximum(q * s, c)) / se)
    return float(min(1.0, max(0.0, np.sum(weights * given))))


@functools.lru_cache(maxsize=256)
def _laguerre(dof: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the generalized Gauss-Laguerre rule for the chi-square's density at ``dof``."""
    nodes, weights = roots_genlaguerre(LAGUERRE_NODES, dof / 2 - 1)
    return nodes, weights / math.gamma(dof / 2)


def detectable_80(se: float, dof: float, alpha: float, threshold: float, power: float = POWER) -> float:
    """The true slowdown (a fraction) a row flags as REGRESSION with probability ``power`` at its noise.

    ``se``: the standard error of the row's log ratio, ``dof`` its degrees of
    freedom, ``alpha`` the row's two-sided level (its share of the family-wise
    alpha), ``threshold`` the practical threshold t. Solves power_of = power.
    Not the change whose estimate would just reach the bound (that one is
    flagged about half the time).
    """
    if not (se >= 0 and dof > 0):
        return math.nan
    if se == 0:
        return threshold
    c = math.log1p(threshold)
    high = max(float(student_t.ppf(1 - alpha / 2, dof)) * se * 3, c) + 10 * se
    return math.expm1(brentq(lambda d: power_of(d, se, dof, alpha, threshold) - power, c - 5 * se, high, xtol=1e-6))


def se_of_interval(low: float, high: float, dof: float, alpha: float) -> float:
    """The standard error of the log ratio that a symmetric t interval [low, high] at level 1 - alpha implies."""
    if not (low > 0 and high > 0 and dof > 0):
        return math.nan
    return (math.log(high) - math.log(low)) / (2 * float(student_t.ppf(1 - alpha / 2, dof)))
