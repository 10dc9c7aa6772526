"""Tests for infrarsi.surrogate.memory_model.TobitMemoryModel."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special

from infrarsi.surrogate import SurrogateError, TobitMemoryModel

C = 80.0  # GiB per GPU
SIG = 0.02 * C


def simulate(
    rng: np.random.Generator,
    n: int,
    beta: np.ndarray,
    b0: float,
    p: float = 0.3,
    seen: tuple[float, float] = (0.3, 1.0),
):
    """Trials with true peaks m.

    OOM rows record C + the shortfall of the failed allocation, a random
    fraction (uniform in ``seen``) of the true excess m - C: a lower bound.
    """
    X = (rng.random((n, beta.size)) < p).astype(float)
    m = b0 + X @ beta + rng.normal(0, SIG, n)
    kind = np.where(m > C, "oom", np.where(m > 0.9 * C, "near_cap", "exact"))
    y = np.where(m > C, C + (m - C) * rng.uniform(*seen, n), m)
    y = np.where(kind == "near_cap", np.nan, y)
    return X, y, kind, m


def log_posterior_scipy(theta, Z, y, kind, m0, v0):
    """The same log posterior written independently with scipy.special."""
    mu = Z @ theta
    e, o, c = kind == "exact", kind == "oom", kind == "near_cap"
    ll = -0.5 * np.sum(((y[e] - mu[e]) / SIG) ** 2)
    ll += np.sum(special.log_ndtr((mu[o] - y[o]) / SIG))
    hi = special.log_ndtr((C - mu[c]) / SIG)
    lo = special.log_ndtr((0.9 * C - mu[c]) / SIG)
    ll += np.sum(hi + np.log1p(-np.exp(lo - hi)))
    return ll - 0.5 * np.sum((theta - m0) ** 2 / v0)


@pytest.fixture(scope="module")
def censored_history():
    rng = np.random.default_rng(0)
    beta = np.array([12.0, -6.0, 3.0, 0.0, 8.0, -2.5, 15.0, 0.5])
    X, y, kind, m = simulate(rng, 400, beta, b0=55.0)
    return X, y, kind, m, beta


def test_parameter_recovery_with_censoring(censored_history) -> None:
    X, y, kind, _, beta = censored_history
    assert (kind == "oom").sum() >= 30 and (kind == "near_cap").sum() >= 30
    model = TobitMemoryModel(C).fit(X, y, kind)
    assert model.converged_
    assert model.intercept == pytest.approx(55.0, abs=4 * model.intercept_sd)
    z = (model.coef_mean - beta) / model.coef_sd
    assert np.all(np.abs(z) < 4), z
    assert np.max(np.abs(model.coef_mean - beta)) < 1.0


def test_naive_fit_treating_bounds_as_peaks_is_biased() -> None:
    """Treating OOM bounds as exact peaks underestimates the big spender; Tobit does not."""
    rng = np.random.default_rng(4)
    beta = np.array([12.0, -6.0, 3.0, 0.0, 8.0, -2.5, 15.0, 0.5])
    X, y, kind, _ = simulate(rng, 400, beta, b0=60.0, seen=(0.1, 0.4))
    keep = kind != "near_cap"
    naive = TobitMemoryModel(C).fit(X[keep], y[keep], ["exact"] * int(keep.sum()))
    tobit = TobitMemoryModel(C).fit(X, y, kind)
    j = 6  # the 15 GiB spender, most often in OOM rows
    assert abs(tobit.coef_mean[j] - beta[j]) < 3 * tobit.coef_sd[j]
    assert naive.coef_mean[j] < beta[j] - 2.0


def test_agrees_with_direct_scipy_maximisation(censored_history) -> None:
    X, y, kind, _, _ = censored_history
    model = TobitMemoryModel(C).fit(X, y, kind)
    Z = np.column_stack([np.ones(len(y)), X])
    m0, v0 = model._m0, model._v0
    e = kind == "exact"
    x0 = np.linalg.lstsq(Z[e], y[e], rcond=None)[0]
    res = optimize.minimize(
        lambda t: -log_posterior_scipy(t, Z, y, kind, m0, v0),
        x0,
        method="L-BFGS-B",
        options={"maxiter": 10000, "ftol": 1e-15, "gtol": 1e-10},
    )
    theta = np.r_[model.intercept, model.coef_mean]
    np.testing.assert_allclose(theta, res.x, atol=2e-3)
    ours = log_posterior_scipy(theta, Z, y, kind, m0, v0)
    assert ours >= -res.fun - 1e-6
    assert model.log_posterior_ == pytest.approx(ours, abs=1e-6)
    # Laplace covariance equals the inverse of a finite-difference Hessian
    f = lambda t: log_posterior_scipy(t, Z, y, kind, m0, v0)  # noqa: E731
    k, h = 7, 1e-3
    ek = np.eye(len(theta))[k]
    d2 = (f(theta + h * ek) - 2 * f(theta) + f(theta - h * ek)) / h**2
    prec = np.linalg.inv(model.cov)
    assert -d2 == pytest.approx(prec[k, k], rel=1e-3)


def test_setting_seen_only_in_oom_trials_gets_at_least_its_bound() -> None:
    rng = np.random.default_rng(1)
    n = 40
    X = np.zeros((n, 3))
    X[:, 1] = rng.random(n) < 0.5
    peaks = 50.0 + 5.0 * X[:, 1] + rng.normal(0, SIG, n)
    kind = ["exact"] * n
    y = list(peaks)
    # feature 0 only ever appears in three OOM trials; the largest bound is C + 9 GiB
    X_oom = np.array([[1.0, 0, 0], [1.0, 1.0, 0], [1.0, 0, 0]])
    bounds = [C + 4.0, C + 9.0, C + 9.0]
    model = TobitMemoryModel(C).fit(np.vstack([X, X_oom]), y + bounds, kind + ["oom"] * 3)
    implied = C + 9.0 - model.intercept  # GiB feature 0 must cost on its own
    assert model.coef_mean[0] >= implied - 0.5 * SIG
    mean, _ = model.predict(np.array([[1.0, 0, 0]]))
    assert mean[0] >= C + 9.0 - 0.5 * SIG
    assert model.p_feasible(np.array([[1.0, 0, 0]]))[0] < 0.05
    assert model.feature_estimates()[0].role == "spender"
    # dropping the OOM trials leaves feature 0 exactly at its prior
    exact_only = TobitMemoryModel(C).fit(X, y, kind)
    assert exact_only.coef_mean[0] == pytest.approx(0.0, abs=1e-9)
    assert exact_only.coef_sd[0] == pytest.approx(0.5 * C, rel=1e-6)


def test_near_cap_rows_bound_the_estimate_to_the_interval() -> None:
    n = 30
    X = np.zeros((n + 4, 2))
    X[n:, 0] = 1.0
    y = np.r_[np.full(n, 40.0) + np.linspace(-1, 1, n), np.full(4, np.nan)]
    kind = ["exact"] * n + ["near_cap"] * 4
    model = TobitMemoryModel(C).fit(X, y, kind)
    mean, sd = model.predict(np.array([[1.0, 0.0]]))
    assert 0.9 * C <= mean[0] <= C
    assert sd[0] < 0.1 * C


def test_collinear_and_singular_designs_do_not_crash() -> None:
    rng = np.random.default_rng(2)
    n = 25
    a = (rng.random(n) < 0.5).astype(float)
    X = np.column_stack([a, a, np.zeros(n), 1 - a])
    y = 50 + 20 * a + rng.normal(0, SIG, n)
    kind = np.where(y > C, "oom", "exact")
    model = TobitMemoryModel(C).fit(X, y, kind)
    mean, sd = model.predict(X)
    assert np.all(np.isfinite(mean)) and np.all(sd > 0)
    assert model.coef_mean[0] + model.coef_mean[1] - model.coef_mean[3] == pytest.approx(20, abs=1.5)
    wide = TobitMemoryModel(C).fit(rng.random((4, 60)) < 0.5, [60.0, 90.0, 70.0, 85.0],
                                   ["exact", "oom", "exact", "oom"])
    assert np.all(np.isfinite(wide.coef_mean)) and wide.converged_
    # all rows censored, no exact peak at all
    allc = TobitMemoryModel(C).fit(np.eye(3), [C + 1, np.nan, C + 2], ["oom", "near_cap", "oom"])
    assert np.all(np.isfinite(allc.coef_mean))


def test_priors_dominate_without_data_and_wash_out_with_data() -> None:
    d = 4
    prior_mean = np.array([10.0, -5.0, 0.0, 2.0])
    prior_var = np.array([1.0, 4.0, 9.0, 1.0])
    empty = TobitMemoryModel(C, prior_mean, prior_var).fit(np.zeros((0, d)), [], [])
    np.testing.assert_allclose(empty.coef_mean, prior_mean)
    np.testing.assert_allclose(empty.coef_sd, np.sqrt(prior_var))
    assert empty.intercept == pytest.approx(0.5 * C)
    assert empty.intercept_sd == pytest.approx(C)
    # intercept prior given explicitly through a length d+1 vector
    with_b0 = TobitMemoryModel(C, np.r_[30.0, prior_mean], np.r_[4.0, prior_var]).fit(
        np.zeros((0, d)), [], []
    )
    assert with_b0.intercept == pytest.approx(30.0) and with_b0.intercept_sd == pytest.approx(2.0)

    rng = np.random.default_rng(3)
    beta = np.array([-3.0, 6.0, 1.0, -1.0])
    X, y, kind, _ = simulate(rng, 1500, beta, b0=60.0, p=0.4)
    a = TobitMemoryModel(C, prior_mean, prior_var).fit(X, y, kind)
    b = TobitMemoryModel(C, -prior_mean, prior_var).fit(X, y, kind)
    assert np.max(np.abs(a.coef_mean - b.coef_mean)) < 0.3
    assert np.max(np.abs(a.coef_mean - beta)) < 0.4


def test_feature_roles_and_feasibility_are_calibrated(censored_history) -> None:
    X, y, kind, m, beta = censored_history
    model = TobitMemoryModel(C).fit(X, y, kind)
    roles = [e.role for e in model.feature_estimates(z=2.0, min_gib=1.0)]
    assert roles[0] == "spender" and roles[6] == "spender" and roles[4] == "spender"
    assert roles[1] == "saver" and roles[5] == "saver"
    assert roles[3] == "uncertain" and roles[7] == "uncertain"
    rng = np.random.default_rng(9)
    Xn = (rng.random((3000, beta.size)) < 0.3).astype(float)
    mn = 55.0 + Xn @ beta + rng.normal(0, SIG, 3000)
    p = model.p_feasible(Xn)
    fits = mn <= C
    assert p[fits].mean() > 0.9 and p[~fits].mean() < 0.25
    for lo, hi in [(0.05, 0.5), (0.5, 0.95)]:  # calibration in the uncertain bands
        band = (p >= lo) & (p < hi)
        assert band.sum() > 50
        assert abs(fits[band].mean() - p[band].mean()) < 0.12


def test_warm_start_and_set_prior_give_the_same_optimum(censored_history) -> None:
    X, y, kind, _, _ = censored_history
    cold = TobitMemoryModel(C).fit(X, y, kind)
    warm = TobitMemoryModel(C).fit(X[:300], y[:300], kind[:300])
    warm.fit(X, y, kind)
    np.testing.assert_allclose(warm.coef_mean, cold.coef_mean, atol=1e-6)
    assert warm.n_iter_ <= cold.n_iter_
    strong = np.full(X.shape[1], 0.0)
    warm.set_prior(strong, 1e-6)
    assert np.max(np.abs(warm.coef_mean)) < 0.01
    warm.set_prior(None, None)
    np.testing.assert_allclose(warm.coef_mean, cold.coef_mean, atol=1e-6)


def test_revise_prior_corrects_understated_declared_gib_for_unmeasured_settings() -> None:
    rng = np.random.default_rng(6)
    d = 12
    true = rng.normal(0, 6, d)
    declared = 0.5 * true + rng.normal(0, 0.3, d)  # the bank/LLM halves every effect
    X = (rng.random((200, d)) < 0.3).astype(float)
    X[:, 9:] = 0.0  # settings 9..11 never tried
    m = 50 + X @ true + rng.normal(0, SIG, 200)
    kind = np.where(m > C, "oom", np.where(m > 0.9 * C, "near_cap", "exact"))
    y = np.where(m > C, C + 0.5 * (m - C), m)
    model = TobitMemoryModel(C, declared, 4.0).fit(X, y, kind)
    err_before = np.abs(model.coef_mean[9:] - true[9:]).mean()
    rev = model.revise_prior()
    assert rev.revised and rev.n_informed == 9
    assert rev.slope == pytest.approx(2.0, abs=0.3)
    assert np.abs(model.coef_mean[9:] - true[9:]).mean() < 0.5 * err_before
    assert model.revise_prior().slope == pytest.approx(rev.slope)  # does not compound
    assert model.n_obs_ == 200


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.ones((2, 2)), [1.0, 2.0], ["exact", "boom"]), r"kind\[1\]"),
        ((np.ones((2, 2)), [1.0], ["exact", "exact"]), "y: expected 2"),
        ((np.ones((2, 2)), [1.0, 2.0], ["exact"]), "kind: expected 2"),
        ((np.ones((2, 2)), [1.0, np.nan], ["exact", "oom"]), "finite"),
        ((np.full((2, 2), np.inf), [1.0, 2.0], ["exact", "exact"]), "X: contains"),
    ],
)
def test_bad_input_raises(args, match: str) -> None:
    with pytest.raises(SurrogateError, match=match):
        TobitMemoryModel(C).fit(*args)


def test_bad_construction_and_use_before_fit() -> None:
    with pytest.raises(SurrogateError, match="capacity_gib"):
        TobitMemoryModel(0.0)
    with pytest.raises(SurrogateError, match="prior_var"):
        TobitMemoryModel(C, prior_var=[1.0, -1.0]).fit(np.zeros((1, 2)), [10.0], ["exact"])
    with pytest.raises(SurrogateError, match="not fitted"):
        TobitMemoryModel(C).predict(np.zeros((1, 2)))
    model = TobitMemoryModel(C).fit(np.zeros((1, 2)), [10.0], ["exact"])
    with pytest.raises(SurrogateError, match="expected 2 feature columns"):
        model.predict(np.zeros((1, 3)))


def test_rejected_refit_keeps_the_previous_posterior(censored_history) -> None:
    X, y, kind, _, _ = censored_history
    model = TobitMemoryModel(C).fit(X, y, kind)
    before = model.predict(X[:5])
    bad_kind = list(kind)
    bad_kind[-1] = "segfault"
    with pytest.raises(SurrogateError):
        model.fit(X[:, :3], y, bad_kind)
    with pytest.raises(SurrogateError):
        TobitMemoryModel(C, prior_var=np.ones(3)).fit(X, y, kind)
    after = model.predict(X[:5])
    np.testing.assert_array_equal(before[0], after[0])
    assert model.n_obs_ == len(y)


def _multiplicative_history(rng: np.random.Generator, n: int = 40):
    """Peaks that scale: ref 40 GiB, three settings multiplying it by 2.2, 0.55 and 0.8 (2% relative noise);
    OOM rows (the first setting without the second) record the true requirement."""
    X = (rng.random((n, 3)) < 0.4).astype(float)
    m = 40.0 * np.exp(X @ np.log([2.2, 0.55, 0.8]) + rng.normal(0, 0.02, n))
    kind = np.where(m > C, "oom", "exact")
    return X, m, kind


def test_log_scale_recovers_ratios_and_bounds_oom_rows() -> None:
    X, m, kind = _multiplicative_history(np.random.default_rng(3))
    assert (kind == "oom").any()
    mm = TobitMemoryModel(C, log_scale=True).fit(X, m, kind)
    np.testing.assert_allclose(np.exp(mm.coef_mean), [2.2, 0.55, 0.8], rtol=0.05)
    assert abs(np.exp(mm.intercept) - 40.0) < 2.0
    # all three on: 40 x 2.2 x 0.55 x 0.8 = 38.7 GiB fits; the first alone (88 GiB) does not; limits are in GiB
    p = mm.p_feasible(np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]))
    assert p[0] > 0.99 and p[1] < 0.01
    assert mm.p_feasible(np.array([[1.0, 1.0, 1.0]]), limit_gib=36.0)[0] < 0.05


def test_log_evidence_prefers_the_form_that_made_the_data() -> None:
    """The Bayes factor between the linear and the log-scale model picks the one the peaks came from."""
    rng = np.random.default_rng(5)
    X, m, kind = _multiplicative_history(rng)
    lin, log = TobitMemoryModel(C).fit(X, m, kind), TobitMemoryModel(C, log_scale=True).fit(X, m, kind)
    assert log.log_evidence > lin.log_evidence + 5
    beta = np.array([20.0, -12.0, -5.0])
    Xa, ya, ka, _ = simulate(rng, 40, beta, 40.0, p=0.4)
    lin, log = TobitMemoryModel(C).fit(Xa, ya, ka), TobitMemoryModel(C, log_scale=True).fit(Xa, ya, ka)
    assert lin.log_evidence > log.log_evidence + 5


def test_log_evidence_matches_numerical_integration_on_one_parameter() -> None:
    """With only an intercept, the Laplace evidence of exact rows is (nearly) the exact Gaussian marginal."""
    y = np.array([41.0, 39.5, 40.2])
    mm = TobitMemoryModel(C, prior_mean=np.array([40.0]), prior_var=np.array([4.0])).fit(np.zeros((3, 0)), y,
                                                                                         ["exact"] * 3)
    cov = 4.0 * np.ones((3, 3)) + SIG**2 * np.eye(3)
    sign, logdet = np.linalg.slogdet(cov)
    r = y - 40.0
    exact = -0.5 * (r @ np.linalg.solve(cov, r) + logdet + 3 * np.log(2 * np.pi))
    assert abs(mm.log_evidence - exact) < 1e-6


def test_log_scale_refuses_non_positive_peaks() -> None:
    with pytest.raises(SurrogateError, match="log-scale model needs"):
        TobitMemoryModel(C, log_scale=True).fit(np.zeros((1, 1)), [0.0], ["exact"])
