"""Moderated variances: rows of one kind lend each other degrees of freedom (empirical Bayes, as limma does).

Two separate reports hold 3 process units a side: a row's own variance of
its log unit values has 4 degrees of freedom, and a family-wise t quantile at
4 degrees of freedom is 8-25, so on its own no row can tell 20 % from nothing.
But the rows of one kind (one workload on one device) are measured in the same
processes, and their variances scatter around a common level. Following
Smyth (2004), the row variances s2_g with d_g degrees of freedom are taken as
draws of s0^2 * d0 / chi2(d0) scaled by chi2(d_g) / d_g; d0 and s0^2 are
estimated from all the rows by the moments of log s2_g (``fit_prior``), and each
row's moderated variance is (d0 s0^2 + d_g s2_g) / (d0 + d_g) with d0 + d_g
degrees of freedom (``squeeze``). Its t statistic then has a t distribution at
those degrees of freedom under the model, so the interval keeps its coverage
while its quantile falls towards the normal one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, polygamma

# Prior degrees of freedom above this are as good as infinite (all rows share one variance); capping keeps
# the arithmetic finite.
MAX_PRIOR_DOF = 1e4
MIN_ROWS = 3  # fewer rows than this estimate no prior: each row keeps its own variance


def trigamma(x):
    return polygamma(1, x)


def trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (y > 0), by Newton's method on 1 / trigamma, as limma's trigammaInverse."""
    if y > 1e7:
        return 1 / math.sqrt(y)
    if y < 1e-6:
        return 1 / y
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = float(trigamma(x))
        step = tri * (1 - tri / y) / float(polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


@dataclass(frozen=True)
class Prior:
    dof: float  # d0: the degrees of freedom the prior lends each row (0: none)
    variance: float  # s0^2


NO_PRIOR = Prior(0.0, 0.0)


def fit_prior(variances: np.ndarray, dofs: np.ndarray) -> Prior:
    """d0 and s0^2 from rows' sample variances and their degrees of freedom (limma's fitFDist, without covariate).

    Rows with no spread (a zero variance) or no degrees of freedom are left
    out; fewer than MIN_ROWS usable rows give NO_PRIOR.
    """
    variances, dofs = np.asarray(variances, dtype=float), np.asarray(dofs, dtype=float)
    usable = (variances > 0) & (dofs > 0) & np.isfinite(variances)
    if usable.sum() < MIN_ROWS:
        return NO_PRIOR
    s2, d = variances[usable], dofs[usable]
    z = np.log(s2)
    e = z - digamma(d / 2) + np.log(d / 2)
    e_mean = float(np.mean(e))
    e_var = float(np.var(e, ddof=1) - np.mean(trigamma(d / 2)))
    if e_var > 0:
        d0 = min(2 * trigamma_inverse(e_var), MAX_PRIOR_DOF)
    else:
        d0 = MAX_PRIOR_DOF
    s0 = math.exp(e_mean + float(digamma(d0 / 2)) - math.log(d0 / 2))
    return Prior(d0, s0)


def squeeze(variance: float, dof: float, prior: Prior) -> tuple[float, float]:
    """(moderated variance, its degrees of freedom) of one row under ``prior``."""
    if prior.dof <= 0:
        return variance, dof
    return (prior.dof * prior.variance + dof * variance) / (prior.dof + dof), prior.dof + dof
