"""Tests for infrarsi.surrogate.priors (empirical Bayes, patch shrinkage) and infrarsi.surrogate.amdahl."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.surrogate import (
    SurrogateError,
    amdahl_ceiling,
    cap_log_speedup,
    empirical_bayes_revision,
    floor_prior_sd,
    phase_share,
    revise_kappa,
    shrink_patch_prior,
)

PHASES = {"forward": 0.30, "backward": 0.45, "optimizer": 0.10, "data": 0.05, "collectives": 0.10}


def test_floor_prior_sd() -> None:
    sd = floor_prior_sd([0.0, 0.2, -0.6, 0.01], [0.001, 0.001, 0.5, 0.03], 0.02)
    np.testing.assert_allclose(sd, [0.02, 0.1, 0.5, 0.03])


def test_patch_prediction_is_shrunk_by_kappa0() -> None:
    mean, sd = shrink_patch_prior([0.10, -0.04, 0.0], kappa0=0.5, sigma_min=0.01)
    np.testing.assert_allclose(mean, [0.05, -0.02, 0.0])
    np.testing.assert_allclose(sd, [0.025, 0.01, 0.01])
    with pytest.raises(SurrogateError, match="kappa0"):
        shrink_patch_prior([0.1], kappa0=1.5)


def test_revise_kappa_moves_toward_observed_ratio_and_stays_in_range() -> None:
    rng = np.random.default_rng(0)
    llm = rng.uniform(0.02, 0.2, 40)
    measured = 0.2 * llm + rng.normal(0, 0.002, 40)  # patches deliver a fifth of the claim
    kappa = revise_kappa(llm, measured, 0.002**2, kappa0=0.5)
    assert 0.18 < kappa < 0.25
    assert revise_kappa([], [], 1.0, kappa0=0.4) == 0.4
    assert revise_kappa(llm, -measured, 0.002**2) == 0.0
    few = revise_kappa(llm[:1], measured[:1], 0.002**2, kappa0=0.5)
    assert kappa < few < 0.5  # one patch moves kappa only part of the way


def test_empirical_bayes_recovers_calibration_line_and_spread() -> None:
    rng = np.random.default_rng(1)
    d = 200
    mu0 = rng.normal(0, 0.1, d)
    truth = 0.01 + 0.5 * mu0 + rng.normal(0, 0.03, d)
    var = np.full(d, 0.01**2)
    est = truth + rng.normal(0, 0.01, d)
    informed = np.arange(d) < 150
    rev = empirical_bayes_revision(mu0, 0.05, est, var, informed, sigma_min=0.005)
    assert rev.revised and rev.n_informed == 150
    assert rev.slope == pytest.approx(0.5, abs=0.06)
    assert rev.intercept == pytest.approx(0.01, abs=0.008)
    assert rev.tau == pytest.approx(0.03, abs=0.006)
    # unmeasured features: revised levels are closer to the truth than the raw prior
    un = ~informed
    assert np.mean(np.abs(rev.mean[un] - truth[un])) < 0.7 * np.mean(np.abs(mu0[un] - truth[un]))
    # carried prior for measured features sits between the line and the measurement
    j = 0
    lo, hi = sorted([rev.mean[j], est[j]])
    assert lo - 1e-12 <= rev.carried_mean[j] <= hi + 1e-12
    assert rev.carried_sd[j] < min(rev.sd[j], 0.01)
    np.testing.assert_allclose(rev.carried_mean[un], rev.mean[un])


def test_empirical_bayes_ignores_anticorrelated_priors_and_needs_enough_data() -> None:
    rng = np.random.default_rng(2)
    mu0 = rng.normal(0, 0.1, 50)
    est = -0.8 * mu0 + rng.normal(0, 0.01, 50)
    rev = empirical_bayes_revision(mu0, 0.05, est, np.full(50, 1e-4))
    assert rev.slope == 0.0  # never inverted
    assert np.ptp(rev.mean) == pytest.approx(0.0, abs=1e-12)
    few = empirical_bayes_revision(mu0, 0.05, est, np.r_[1e-4, 1e-4, np.full(48, np.inf)])
    assert not few.revised and few.n_informed == 2
    np.testing.assert_allclose(few.mean, mu0)
    with pytest.raises(SurrogateError, match="estimate"):
        empirical_bayes_revision(mu0, 0.05, est[:3], np.ones(3))


def test_amdahl_ceiling() -> None:
    s = phase_share(PHASES, ["optimizer"])
    assert s == pytest.approx(0.10)
    assert amdahl_ceiling(PHASES, ["optimizer"]) == pytest.approx(-math.log(0.9))
    assert amdahl_ceiling(PHASES, ["forward", "backward"], max_phase_speedup=2.0) == pytest.approx(
        -math.log(1 - 0.75 + 0.375)
    )
    assert amdahl_ceiling(PHASES, list(PHASES)) == math.inf
    # raw times work as well as shares
    raw = {k: 3.0 * v for k, v in PHASES.items()}
    assert amdahl_ceiling(raw, ["data"]) == pytest.approx(amdahl_ceiling(PHASES, ["data"]))
    with pytest.raises(SurrogateError, match="unknown phase"):
        amdahl_ceiling(PHASES, ["attention"])
    with pytest.raises(SurrogateError, match="max_phase_speedup"):
        amdahl_ceiling(PHASES, ["data"], max_phase_speedup=1.0)
    with pytest.raises(SurrogateError, match="phase_times"):
        phase_share({"a": -1.0}, ["a"])


def test_cap_log_speedup_caps_gains_only() -> None:
    ceiling = amdahl_ceiling(PHASES, ["optimizer"])
    capped = cap_log_speedup([0.5, 0.05, -0.2], ceiling)
    np.testing.assert_allclose(capped, [ceiling, 0.05, -0.2])
