"""Tests for infrarsi.surrogate.time_model.BayesLinearTimeModel."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.surrogate import BayesLinearTimeModel, SurrogateError
from infrarsi.surrogate.time_model import chol_rank_one_update


def design(rng: np.random.Generator, n: int, d: int, p: float = 0.3) -> np.ndarray:
    return (rng.random((n, d)) < p).astype(float)


def dense_posterior(X, y, mu0, var0, noise_var):
    """Textbook posterior with an explicit inverse (independent reference)."""
    P = np.diag(1.0 / var0) + X.T @ X / noise_var
    S = np.linalg.inv(P)
    return S @ (mu0 / var0 + X.T @ y / noise_var), S


def test_parameter_recovery_with_calibrated_uncertainty() -> None:
    rng = np.random.default_rng(0)
    d, n, noise = 15, 400, 0.01
    beta = rng.normal(0, 0.08, d)
    X = design(rng, n, d)
    y = X @ beta + rng.normal(0, noise, n)
    m = BayesLinearTimeModel(np.zeros(d), 0.1**2, noise**2).fit(X, y)
    z = (m.coef_mean - beta) / m.coef_sd
    assert np.all(np.abs(z) < 4)
    assert np.max(np.abs(m.coef_mean - beta)) < 0.01
    assert m.n_obs == n and m.dim == d


def test_closed_form_matches_dense_inverse_and_incremental_updates() -> None:
    rng = np.random.default_rng(1)
    d, n = 12, 60
    X = design(rng, n, d)
    y = X @ rng.normal(0, 0.05, d) + rng.normal(0, 0.02, n)
    mu0 = rng.normal(0, 0.03, d)
    var0 = np.full(d, 0.05**2)
    batch = BayesLinearTimeModel(mu0, var0, 0.02**2).fit(X, y)
    inc = BayesLinearTimeModel(mu0, var0, 0.02**2)
    for i in range(n):
        inc.update(X[i], y[i])
    ref_mean, ref_cov = dense_posterior(X, y, mu0, batch.prior_var, 0.02**2)
    np.testing.assert_allclose(batch.coef_mean, ref_mean, atol=1e-10)
    np.testing.assert_allclose(batch.coef_cov, ref_cov, atol=1e-12)
    np.testing.assert_allclose(inc.coef_mean, batch.coef_mean, atol=1e-10)
    Xq = design(rng, 20, d)
    mb, vb = batch.predict(Xq)
    mi, vi = inc.predict(Xq)
    np.testing.assert_allclose(mi, mb, atol=1e-10)
    np.testing.assert_allclose(vi, vb, rtol=1e-8)
    np.testing.assert_allclose(vb, np.einsum("ij,jk,ik->i", Xq, ref_cov, Xq), rtol=1e-8)
    _, vn = batch.predict(Xq, include_noise=True)
    np.testing.assert_allclose(vn - vb, 0.02**2)


def test_rank_one_cholesky_update() -> None:
    rng = np.random.default_rng(2)
    A = rng.normal(size=(8, 8))
    P = A @ A.T + 8 * np.eye(8)
    v = rng.normal(size=8)
    L = chol_rank_one_update(np.linalg.cholesky(P), v)
    np.testing.assert_allclose(L @ L.T, P + np.outer(v, v), atol=1e-10)
    assert np.allclose(L, np.tril(L))


def test_prior_sd_is_floored() -> None:
    mu0 = np.array([0.0, 0.3, -0.5, 0.01])
    m = BayesLinearTimeModel(mu0, 1e-8, 1e-4, sigma_min=0.02)
    sd = np.sqrt(m.prior_var)
    np.testing.assert_allclose(sd, [0.02, 0.15, 0.25, 0.02])
    wide = BayesLinearTimeModel(mu0, 0.5**2, 1e-4)
    np.testing.assert_allclose(np.sqrt(wide.prior_var), 0.5)


def test_prior_dominates_with_no_data_and_washes_out_with_enough() -> None:
    rng = np.random.default_rng(3)
    d = 6
    beta = np.array([0.10, -0.05, 0.0, 0.30, 0.02, -0.2])
    optimistic = BayesLinearTimeModel(np.full(d, 0.4), 0.04, 1e-4).fit(np.zeros((0, d)), [])
    np.testing.assert_allclose(optimistic.coef_mean, 0.4)
    mean, var = optimistic.predict(np.eye(d))
    np.testing.assert_allclose(mean, 0.4)
    np.testing.assert_allclose(var, optimistic.prior_var)
    pessimistic = BayesLinearTimeModel(np.full(d, -0.4), 0.04, 1e-4)
    X = design(rng, 2000, d)
    y = X @ beta + rng.normal(0, 0.01, 2000)
    optimistic.fit(X, y)
    pessimistic.fit(X, y)
    assert np.max(np.abs(optimistic.coef_mean - pessimistic.coef_mean)) < 2e-3
    assert np.max(np.abs(optimistic.coef_mean - beta)) < 3e-3


def test_collinear_and_singular_designs_do_not_crash() -> None:
    rng = np.random.default_rng(4)
    n = 30
    a = (rng.random(n) < 0.5).astype(float)
    X = np.column_stack([a, a, np.zeros(n), 1 - a, rng.random(n) < 0.5])
    y = 0.1 * a + rng.normal(0, 0.005, n)
    m = BayesLinearTimeModel(0.0, 0.1**2, 0.005**2).fit(X, y)
    mean, var = m.predict(X)
    assert np.all(np.isfinite(mean)) and np.all(var > 0)
    # duplicated columns: the sum is pinned down, the split is not
    assert m.coef_mean[0] + m.coef_mean[1] == pytest.approx(0.1, abs=0.01)
    sum_sd = float(m.predict(np.array([1, 1, 0, 0, 0.0]))[1][0]) ** 0.5
    assert m.coef_sd[0] > 5 * sum_sd
    # the never-active column stays at its prior
    assert m.coef_mean[2] == pytest.approx(0.0, abs=1e-12)
    assert m.coef_sd[2] == pytest.approx(0.1)
    # more features than trials
    wide = BayesLinearTimeModel(0.0, 0.05**2, 1e-4).fit(design(rng, 5, 50), rng.normal(0, 0.1, 5))
    assert np.all(np.isfinite(wide.coef_mean))
    # huge prior variance with exact collinearity still factors
    huge = BayesLinearTimeModel(0.0, 1e12, 1e-10).fit(X, y)
    assert np.all(np.isfinite(huge.predict(X)[0]))


def test_set_prior_resolves_in_place_and_revision_moves_levels_toward_measurements() -> None:
    rng = np.random.default_rng(5)
    d = 30
    llm = rng.normal(0, 0.1, d)
    beta = 0.4 * llm + rng.normal(0, 0.005, d)  # the LLM overstates gains 2.5x
    measured = np.arange(d) < 20
    X = design(rng, 300, d)
    X[:, ~measured] = 0.0  # features 20..29 never tried
    y = X @ beta + rng.normal(0, 0.005, 300)
    m = BayesLinearTimeModel(llm, 0.05**2, 0.005**2, sigma_min=0.005).fit(X, y)
    before = m.coef_mean.copy()
    err_before = np.abs(before[~measured] - beta[~measured]).mean()
    rev = m.revise_prior()
    assert rev.revised and rev.n_informed == 20
    assert rev.slope == pytest.approx(0.4, abs=0.1)
    err_after = np.abs(m.coef_mean[~measured] - beta[~measured]).mean()
    assert err_after < 0.5 * err_before
    # measured coefficients barely move (data dominate), posterior re-solved with same data
    assert np.max(np.abs(m.coef_mean[measured] - before[measured])) < 0.01
    assert m.n_obs == 300
    # revision starts from the original levels: repeating it is idempotent
    again = m.revise_prior()
    assert again.slope == pytest.approx(rev.slope, rel=1e-6)
    # set_prior directly
    m.set_prior(np.zeros(d), 1.0)
    np.testing.assert_allclose(m.prior_mean, 0.0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.fit(np.ones((3, 4)), np.ones(3)), "expected 3 feature columns"),
        (lambda m: m.fit(np.ones((3, 3)), np.ones(2)), "y: expected 3"),
        (lambda m: m.fit(np.full((2, 3), np.nan), np.ones(2)), "X: contains NaN"),
        (lambda m: m.update(np.ones((2, 3)), 0.1), "one feature row"),
        (lambda m: m.predict(np.ones((1, 2))), "expected 3 feature columns"),
    ],
)
def test_bad_shapes_raise_surrogate_error(call, match: str) -> None:
    m = BayesLinearTimeModel(np.zeros(3), 0.01, 1e-4)
    with pytest.raises(SurrogateError, match=match):
        call(m)


def test_set_noise_var_resolves_and_matches_a_fresh_fit() -> None:
    rng = np.random.default_rng(6)
    X = design(rng, 40, 5)
    y = X @ rng.normal(0, 0.05, 5) + rng.normal(0, 0.01, 40)
    m = BayesLinearTimeModel(0.0, 0.01, 1e-2).fit(X, y)
    loose = m.coef_mean
    m.set_noise_var(1e-4)
    fresh = BayesLinearTimeModel(0.0, 0.01, 1e-4).fit(X, y)
    np.testing.assert_allclose(m.coef_mean, fresh.coef_mean, atol=1e-12)
    assert not np.allclose(loose, fresh.coef_mean, atol=1e-3)
    with pytest.raises(SurrogateError, match="noise_var"):
        m.set_noise_var(-1.0)


def test_lever_gains_are_capped_by_amdahl_ceiling() -> None:
    from infrarsi.surrogate import amdahl_ceiling

    phases = {"forward": 0.3, "backward": 0.5, "optimizer": 0.2}
    X = np.eye(3)
    m = BayesLinearTimeModel(np.array([0.9, 0.05, -0.1]), 0.5**2, 1e-4).fit(np.zeros((0, 3)), [])
    ceilings = [amdahl_ceiling(phases, ["optimizer"]), np.inf, amdahl_ceiling(phases, ["forward"])]
    gain, sd = m.lever_gains(ceilings)
    np.testing.assert_allclose(gain, [-np.log(0.8), 0.05, -0.1])
    np.testing.assert_allclose(sd, np.sqrt(m.prior_var))
    assert m.lever_gains()[0][0] == pytest.approx(0.9)
    assert m.predict(X)[0][0] == pytest.approx(0.9)  # predict itself is not capped
    with pytest.raises(SurrogateError, match="ceiling"):
        m.lever_gains([1.0, 2.0])


def test_bad_constructor_arguments() -> None:
    with pytest.raises(SurrogateError, match="noise_var"):
        BayesLinearTimeModel(0.0, 0.01, 0.0)
    with pytest.raises(SurrogateError, match="prior_var"):
        BayesLinearTimeModel(np.zeros(3), [0.1, -1.0, 0.1], 1e-4)
    with pytest.raises(SurrogateError, match="prior_var"):
        BayesLinearTimeModel(np.zeros(3), np.ones(2), 1e-4)


def test_scalar_prior_takes_dimension_from_first_fit() -> None:
    m = BayesLinearTimeModel(0.0, 0.01, 1e-4)
    assert m.dim is None
    with pytest.raises(SurrogateError, match="call fit first"):
        m.predict(np.zeros((1, 3)))
    m.update(np.array([1.0, 0.0, 1.0]), 0.05)
    assert m.dim == 3 and m.n_obs == 1
