"""bench/stats: verdicts that read significance and relevance apart, the power behind detectable_80, and the
moderated variance, each against an independent simulation or a likelihood fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from bench.stats.moderated import NO_PRIOR, fit_prior, squeeze, trigamma, trigamma_inverse
from bench.stats.verdicts import (
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    SAME,
    detectable_80,
    power_of,
    verdict_of,
)


@pytest.fixture
def rng(generator):
    return np.random.default_rng(int(generator.initial_seed()))


def test_a_significant_change_past_the_threshold_is_a_regression_though_its_interval_reaches_below_it():
    # Read by a quick A/B run of a 10 % slowdown (the 8x128x1024 out row after its second stage), and the fused
    # call there: each interval excludes 1, each estimate lies past 3 %.
    assert verdict_of(1.117, 1.084, 1.151, 0.03) == REGRESSION
    assert verdict_of(1.092, 1.001, 1.191, 0.03) == REGRESSION
    assert verdict_of(1.117, 1.084, 1.151, 0.10) == REGRESSION  # past 10 % too
    assert verdict_of(1.092, 1.001, 1.191, 0.10) == INCONCLUSIVE  # significant, but the estimate short of 10 %


def test_the_verdicts_mirror_and_separate_significance_from_relevance():
    assert verdict_of(1 / 1.117, 1 / 1.151, 1 / 1.084, 0.03) == IMPROVEMENT
    assert verdict_of(1.01, 1.005, 1.015, 0.03) == SAME  # significant, and provably small
    assert verdict_of(1.05, 0.98, 1.12, 0.03) == INCONCLUSIVE  # past the threshold, not significant
    assert verdict_of(1.02, 1.005, 1.035, 0.03) == INCONCLUSIVE  # significant, short of t, may reach past it
    assert verdict_of(1.00, 0.99, 1.01, 0.03) == SAME


def _simulated_power(rng, slowdown_log, se, dof, alpha, threshold, trials=40_000):
    """P(REGRESSION) by simulation: a normal log estimate, an independent chi-square standard error."""
    estimate = rng.normal(slowdown_log, se, trials)
    s = se * np.sqrt(rng.chisquare(dof, trials) / dof)
    half = scipy.stats.t.ppf(1 - alpha / 2, dof) * s
    flagged = [
        verdict_of(math.exp(e), math.exp(e - h), math.exp(e + h), threshold) == REGRESSION
        for e, h in zip(estimate, half, strict=True)
    ]
    return float(np.mean(flagged))


@pytest.mark.parametrize(("se", "dof"), [(0.01, 7), (0.03, 7), (0.05, 19), (0.004, 30)])
def test_detectable_80_is_flagged_four_times_in_five(rng, se, dof):
    alpha = 0.05 / 32  # a quick A/B run's rows
    change = detectable_80(se, dof, alpha, 0.03)
    assert _simulated_power(rng, math.log1p(change), se, dof, alpha, 0.03) == pytest.approx(0.80, abs=0.012)
    # The change whose estimate just reaches the interval's bound, what the table called detectable before, is
    # flagged about half the time, far short of 80 %.
    q = scipy.stats.t.ppf(1 - alpha / 2, dof)
    at_the_bound = max(q * se, math.log1p(0.03))
    assert power_of(at_the_bound, se, dof, alpha, 0.03) < 0.6
    assert math.log1p(change) > at_the_bound + 0.5 * se


def test_power_grows_with_the_slowdown_and_is_alpha_over_two_at_most_without_one():
    se, dof, alpha = 0.02, 9, 0.05 / 30
    powers = [power_of(math.log1p(p), se, dof, alpha, 0.03) for p in (0.0, 0.02, 0.05, 0.1, 0.2)]
    assert powers == sorted(powers) and powers[0] <= alpha / 2 and powers[-1] > 0.99


def test_trigamma_inverse_inverts_trigamma():
    for x in (0.05, 0.7, 3.0, 40.0, 900.0):
        assert trigamma_inverse(float(trigamma(x))) == pytest.approx(x, rel=1e-6)


def _row_variances(rng, rows, d0, s0, d):
    """Row variances as the moderated model draws them: a true variance per row, then a sample variance on d."""
    true = s0 * d0 / rng.chisquare(d0, rows)
    return true, true * rng.chisquare(d, rows) / d


def test_the_prior_matches_a_maximum_likelihood_fit(rng):
    # Under the model s2 / s0 is F(d, d0): the moment fit (limma's) and scipy's likelihood fit agree.
    d = np.full(1000, 4.0)
    _, s2 = _row_variances(rng, 1000, 6.0, 0.01, 4)
    prior = fit_prior(s2, d)

    def minus_log_likelihood(params):
        log_d0, log_s0 = params
        return -np.sum(scipy.stats.f.logpdf(s2 / np.exp(log_s0), 4, np.exp(log_d0)) - log_s0)

    fitted = scipy.optimize.minimize(minus_log_likelihood, [np.log(5), np.log(0.02)], method="Nelder-Mead").x
    # Two estimators of one truth (d0 = 6, s0^2 = 0.01): they agree within their own sampling noise.
    assert prior.dof == pytest.approx(np.exp(fitted[0]), rel=0.35) and 3.5 < prior.dof < 10
    assert prior.variance == pytest.approx(np.exp(fitted[1]), rel=0.12) and 0.008 < prior.variance < 0.0125


def test_rows_sharing_one_variance_get_a_prior_of_many_degrees_of_freedom(rng):
    s2 = 0.01 * rng.chisquare(4, 1000) / 4
    prior = fit_prior(s2, np.full(1000, 4.0))
    # Infinite in truth; the moment estimate's own noise leaves it above about 30 in 49 of 50 draws.
    assert prior.dof > 20 and prior.variance == pytest.approx(0.01, rel=0.1)
    assert fit_prior(s2[:2], np.full(2, 4.0)) == NO_PRIOR  # two rows estimate no prior


def test_moderated_intervals_keep_their_coverage_and_are_narrower(rng):
    # 3 units a side (two separate reports), 30 rows of one kind whose variances scatter as the model says.
    alpha, covered, widths, plain_widths = 0.05, 0, [], []
    for _ in range(200):
        true, _ = _row_variances(rng, 30, 8.0, 0.004, 4)
        base = rng.normal(0.0, np.sqrt(true)[:, None], (30, 3))
        new = rng.normal(0.0, np.sqrt(true)[:, None], (30, 3))
        s2 = (base.var(axis=1, ddof=1) + new.var(axis=1, ddof=1)) / 2
        prior = fit_prior(s2, np.full(30, 4.0))
        for row in range(30):
            variance, dof = squeeze(s2[row], 4.0, prior)
            half = scipy.stats.t.ppf(1 - alpha / 2, dof) * math.sqrt(variance * 2 / 3)
            difference = new[row].mean() - base[row].mean()
            covered += abs(difference) <= half
            # The widths at the family-wise level over the 30 rows, where a row's quantile matters most.
            widths.append(scipy.stats.t.ppf(1 - alpha / 60, dof) * math.sqrt(variance * 2 / 3))
            plain_widths.append(scipy.stats.t.ppf(1 - alpha / 60, 4) * math.sqrt(s2[row] * 2 / 3))
    assert covered / 6000 == pytest.approx(0.95, abs=0.012)
    assert np.median(widths) < 0.6 * np.median(plain_widths)
