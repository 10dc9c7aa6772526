"""Censored (Tobit) peak-memory model (paper section 4.1, "Censored Memory Models").

Model: the per-GPU peak memory of a candidate with feature row x is
m(x) = b0 + x . beta + eps, eps ~ N(0, sigma_obs^2), sigma_obs = 0.02 * C,
where C is the device capacity in GiB.  b0, the **intercept, is a model
parameter**: the reference configuration's peak (all features 0).  beta_j is
the GiB a setting adds (spender, > 0) or saves (saver, < 0).

Each trial contributes one of three likelihood terms (``kind`` per row):

* ``"exact"``: the run completed with measured peak y: Gaussian residual
  N(y; mu, sigma_obs^2).
* ``"oom"``: the run died of OOM; y = C + the failed allocation's shortfall
  is a lower bound on the requirement: right-censored term P(m >= y) =
  Phi((mu - y) / sigma_obs).
* ``"near_cap"``: the allocator thrashed near capacity: interval-censored
  term P(0.9 C <= m <= C); y is ignored (may be NaN).

Prior: theta = (b0, beta) ~ N(m0, diag(v0)).  Feature priors default to
N(0, (0.5 C)^2); priors from the experience bank enter through ``prior_mean``
/ ``prior_var``.  The intercept prior defaults to a weak N(centre, C^2) whose
centre comes from the data (the median exact peak; else 0.95 C if only
near-cap rows; else C if only OOM rows; else 0.5 C).

Log scale (``log_scale=True``): the same model of ln m, for settings that
scale memory rather than add to it (activation memory is micro-batch x
recompute share / (TP x CP) x the attention kernel's factor).  y, the
capacity and the near-cap interval are taken to logs, sigma_obs is
``sigma_obs_frac`` (a relative error), the default prior SDs are 0.5 and 1
(factors of e^0.5 and e), and ``predict`` answers in ln GiB.
``log_evidence`` (Laplace, with the log scale's Jacobian) compares the two
forms on the same data.

The MAP estimate is found by damped Newton steps (backtracking line search
on the log posterior, which is concave because every term is log-concave),
and the Laplace approximation (inverse negative Hessian at the MAP, held as a
Cholesky factor) gives parameter uncertainty, prediction SDs and feasibility
probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg
from scipy.special import log_ndtr, ndtr

from infrarsi.surrogate._blas import single_threaded
from infrarsi.surrogate._linalg import chol_lower
from infrarsi.surrogate._validate import as_matrix, broadcast_param
from infrarsi.surrogate.errors import SurrogateError
from infrarsi.surrogate.priors import PriorRevision, empirical_bayes_revision

KINDS = ("exact", "oom", "near_cap")
#: Lower edge of the near-capacity interval, as a fraction of capacity.
NEAR_CAP_LOW = 0.9
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class FeatureMemoryEstimate:
    """Posterior memory effect of one feature (a knob setting or patch).

    Attributes:
        index: column of the feature in X.
        mean_gib: posterior mean GiB added (negative: saved).
        sd_gib: Laplace posterior SD.
        role: "spender" (mean - z sd > min_gib), "saver" (mean + z sd <
            -min_gib) or "uncertain".
    """

    index: int
    mean_gib: float
    sd_gib: float
    role: str


def _log_phi(z: np.ndarray) -> np.ndarray:
    return -0.5 * z * z - _LOG_SQRT_2PI


def _log_interval(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(Phi(b) - Phi(a)) for a < b, stable in both tails."""
    out = np.empty_like(a)
    upper = a > 0
    la, lb = log_ndtr(-a[upper]), log_ndtr(-b[upper])
    out[upper] = la + np.log1p(-np.exp(lb - la))
    lo = ~upper
    la, lb = log_ndtr(a[lo]), log_ndtr(b[lo])
    out[lo] = lb + np.log1p(-np.exp(la - lb))
    return out


def _censored_terms(
    mu: np.ndarray, y: np.ndarray, is_oom: np.ndarray, lo: float, hi: float, sigma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-likelihood, d/dmu and d2/dmu2 of the censored rows (oom, and near_cap in [lo, hi])."""
    ll = np.empty_like(mu)
    g = np.empty_like(mu)
    h = np.empty_like(mu)
    if np.any(is_oom):
        z = (mu[is_oom] - y[is_oom]) / sigma
        lcdf = log_ndtr(z)
        lam = np.exp(_log_phi(z) - lcdf)
        ll[is_oom] = lcdf
        g[is_oom] = lam / sigma
        h[is_oom] = -np.clip(lam * (z + lam), 0.0, 1.0) / sigma**2
    near = ~is_oom
    if np.any(near):
        a = (lo - mu[near]) / sigma
        b = (hi - mu[near]) / sigma
        lz = _log_interval(a, b)
        pa = np.exp(_log_phi(a) - lz)
        pb = np.exp(_log_phi(b) - lz)
        ll[near] = lz
        g[near] = (pa - pb) / sigma
        trunc_var = 1.0 + (a * pa - b * pb) - (pa - pb) ** 2
        h[near] = -np.clip(1.0 - trunc_var, 0.0, 1.0) / sigma**2
    return ll, g, h


class TobitMemoryModel:
    """Peak-memory model with exact, OOM (right-censored) and near-cap observations.

    Args:
        capacity_gib: device capacity C in GiB (> 0).
        prior_mean: feature prior means in GiB: None (all 0), a scalar, a
            length-d vector, or a length-(d+1) vector whose first entry is
            the intercept's prior mean.
        prior_var: feature prior variances in GiB^2, same conventions
            (None: (0.5 C)^2 per feature, C^2 for the intercept).
        sigma_obs_frac: sigma_obs / C (paper: 0.02).
        log_scale: model log peak instead of peak (see "Log scale" in the
            module docstring).
        max_iter, tol: Newton iteration cap and convergence threshold on the
            Newton decrement (log-posterior units).

    Raises:
        SurrogateError: non-positive capacity or variances, shape mismatch.
    """

    def __init__(
        self,
        capacity_gib: float,
        prior_mean: ArrayLike | None = None,
        prior_var: ArrayLike | None = None,
        sigma_obs_frac: float = 0.02,
        max_iter: int = 100,
        tol: float = 1e-10,
        log_scale: bool = False,
    ) -> None:
        if not (math.isfinite(capacity_gib) and capacity_gib > 0):
            raise SurrogateError(f"capacity_gib: must be finite and > 0, got {capacity_gib!r}")
        if not (math.isfinite(sigma_obs_frac) and sigma_obs_frac > 0):
            raise SurrogateError(f"sigma_obs_frac: must be > 0, got {sigma_obs_frac!r}")
        self.capacity_gib = float(capacity_gib)
        self.log_scale = bool(log_scale)
        #: the model's unit: GiB scale of C (linear) or 1 (log); default prior SDs and sigma_obs are in it
        self._unit = 1.0 if self.log_scale else self.capacity_gib
        #: the capacity and the near-cap interval's lower edge, in model units
        self._hi = self._to_model(self.capacity_gib)
        self._lo = self._to_model(NEAR_CAP_LOW * self.capacity_gib)
        self.sigma_obs = sigma_obs_frac * self._unit
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self._prior_mean_arg = prior_mean
        self._prior_var_arg = prior_var
        self._declared = (prior_mean, prior_var)
        self._theta: np.ndarray | None = None
        self._L: np.ndarray | None = None
        self._d: int | None = None
        self.n_iter_ = 0
        self.converged_ = False
        self.n_obs_ = 0
        self.log_posterior_ = float("nan")

    def _to_model(self, gib: float) -> float:
        return math.log(gib) if self.log_scale else gib

    def _peaks_gib(self) -> np.ndarray:
        """The stored y in GiB, as ``fit`` takes it (NaN on near-cap rows): for refits under another prior."""
        y = np.exp(self._y) if self.log_scale else self._y
        return np.where(self._kinds != 2, y, np.nan)

    # ----------------------------------------------------------------- priors
    def _resolve_prior(
        self,
        d: int,
        y: np.ndarray,
        kinds: np.ndarray,
        args: tuple[ArrayLike | None, ArrayLike | None] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Prior mean and variance of theta = (b0, beta), length d + 1.

        ``args`` is a (prior_mean, prior_var) pair in the constructor's
        conventions; default: the prior currently in force.
        """
        U = self._unit
        exact = kinds == 0
        if np.any(exact):
            centre = float(np.median(y[exact]))
        elif np.any(kinds == 2):
            centre = 0.5 * (self._lo + self._hi)
        elif np.any(kinds == 1):
            centre = self._hi
        else:
            centre = self._to_model(0.5 * self.capacity_gib)
        m0 = np.zeros(d + 1)
        v0 = np.full(d + 1, (0.5 * U) ** 2)
        m0[0], v0[0] = centre, U * U
        mean_arg, var_arg = (self._prior_mean_arg, self._prior_var_arg) if args is None else args
        for arg, target, name, positive in (
            (mean_arg, m0, "prior_mean", False),
            (var_arg, v0, "prior_var", True),
        ):
            if arg is None:
                continue
            a = np.asarray(arg, dtype=np.float64)
            if a.ndim == 1 and a.shape[0] == d + 1:
                target[:] = broadcast_param(a, d + 1, name, positive)
            else:
                target[1:] = broadcast_param(a, d, name, positive)
        return m0, v0

    @single_threaded
    def set_prior(self, prior_mean: ArrayLike | None, prior_var: ArrayLike | None) -> "TobitMemoryModel":
        """Replace the prior (same conventions as the constructor) and refit on the stored data.

        Returns self.  Used for empirical prior revision of declared GiB priors.
        """
        self._prior_mean_arg = prior_mean
        self._prior_var_arg = prior_var
        if self._d is not None:
            self.fit(self._X, self._peaks_gib(), [KINDS[k] for k in self._kinds])
        return self

    @single_threaded
    def revise_prior(self, min_informed: int = 3, max_slope: float = 2.0) -> PriorRevision:
        """Empirical-Bayes revision of the declared per-feature GiB priors, refitting in place.

        Fits the model once under a vague prior to see what the data alone say
        about each feature, fits the calibration line measured ~ a + b *
        declared over the features the data inform
        (:func:`infrarsi.surrogate.priors.empirical_bayes_revision`, slope clipped to
        [0, max_slope]), moves every declared feature prior onto it (so
        unmeasured settings inherit the correction), and refits.  The
        intercept prior is left as declared.  Always starts from the
        constructor's declared prior, so repeating it does not compound.

        Returns: the :class:`PriorRevision` (feature parts only).
        Raises: SurrogateError if the model has not been fitted.
        """
        self._require_fit()
        d, U = int(self._d or 0), self._unit
        m_decl, v_decl = self._resolve_prior(d, self._y, self._kinds, self._declared)
        vague = TobitMemoryModel(self.capacity_gib, np.r_[m_decl[0], np.zeros(d)],
                                 np.r_[v_decl[0], np.full(d, 4 * U * U)],
                                 sigma_obs_frac=self.sigma_obs / U, log_scale=self.log_scale)
        vague.fit(self._X, self._peaks_gib(), [KINDS[k] for k in self._kinds])
        est, sd = vague.coef_mean, vague.coef_sd
        rev = empirical_bayes_revision(
            m_decl[1:], np.sqrt(v_decl[1:]), est, sd * sd, sd < U,
            sigma_min=self.sigma_obs, min_informed=min_informed, max_slope=max_slope,
        )
        decl_mean = self._declared[0]
        has_b0 = decl_mean is not None and np.ndim(decl_mean) == 1 and np.shape(decl_mean)[0] == d + 1
        if has_b0:
            self.set_prior(np.r_[m_decl[0], rev.mean], np.r_[v_decl[0], rev.sd**2])
        else:
            self.set_prior(rev.mean, rev.sd**2)
        return rev

    # ---------------------------------------------------------------- fitting
    @single_threaded
    def fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        kind: Sequence[str] | ArrayLike,
        warm_start: bool = True,
    ) -> "TobitMemoryModel":
        """Fit the MAP coefficients and their Laplace covariance.

        Args:
            X: n-by-d feature matrix (n may be 0: the posterior is the prior).
            y: n values in GiB: the measured peak ("exact"), the lower bound
                C + shortfall ("oom"), or ignored ("near_cap", may be NaN).
            kind: n strings from ("exact", "oom", "near_cap").
            warm_start: start Newton from the previous solution when it has
                the same dimension and a higher log posterior.

        Returns: self.
        Raises: SurrogateError on shapes, unknown kinds, non-finite values.
        Collinear or duplicated columns are fine: the prior keeps the
        negative Hessian positive definite.
        """
        A = np.asarray(X, dtype=np.float64)
        if A.ndim == 2 and A.shape[0] == 0:
            A = np.zeros((0, A.shape[1]))
        else:
            A = as_matrix(X, "X", None)
        n, d = A.shape
        kinds_raw = np.asarray(kind, dtype=object).reshape(-1)
        if kinds_raw.shape[0] != n:
            raise SurrogateError(f"kind: expected {n} entries (one per row of X), got {kinds_raw.shape[0]}")
        kinds = np.empty(n, dtype=np.int8)
        for i, k in enumerate(kinds_raw):
            if k not in KINDS:
                raise SurrogateError(f"kind[{i}]: must be one of {KINDS}, got {k!r}")
            kinds[i] = KINDS.index(k)
        yv = np.asarray(y, dtype=np.float64).reshape(-1)
        if yv.shape[0] != n:
            raise SurrogateError(f"y: expected {n} values (one per row of X), got {yv.shape[0]}")
        needs_y = kinds != 2
        if not np.all(np.isfinite(yv[needs_y])):
            raise SurrogateError("y: exact and oom rows need finite values")
        if self.log_scale and not np.all(yv[needs_y] > 0):
            raise SurrogateError("y: a log-scale model needs exact and oom values > 0")
        yv = np.where(needs_y, yv, 1.0)
        if self.log_scale:
            yv = np.log(yv)

        warm = self._theta if (warm_start and self._d == d) else None
        m0, v0 = self._resolve_prior(d, yv, kinds)
        theta, L, n_iter, converged, logpost = self._newton(
            np.hstack([np.ones((n, 1)), A]), yv, kinds, m0, v0, warm
        )
        # commit the new state only once everything has succeeded
        self._X, self._y, self._kinds, self._d = A, yv, kinds, d
        self._m0, self._v0 = m0, v0
        self._theta, self._L = theta, L
        self.n_obs_, self.n_iter_, self.converged_, self.log_posterior_ = n, n_iter, converged, logpost
        return self

    def _newton(
        self,
        Z: np.ndarray,
        y: np.ndarray,
        kinds: np.ndarray,
        m0: np.ndarray,
        v0: np.ndarray,
        warm: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, int, bool, float]:
        """Damped Newton ascent of the log posterior.

        Returns (theta_map, cholesky factor of the negative Hessian at it,
        iterations, converged, log posterior at theta_map).
        """
        s2 = self.sigma_obs**2
        lo, hi = self._lo, self._hi
        p0 = 1.0 / v0
        ex = kinds == 0
        Ze, ye = Z[ex], y[ex]
        Zc, yc = Z[~ex], y[~ex]
        is_oom = kinds[~ex] == 1
        He = Ze.T @ Ze / s2
        He[np.diag_indices_from(He)] += p0
        be = Ze.T @ ye / s2 + p0 * m0

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            r = ye - Ze @ theta
            dm = theta - m0
            f = -0.5 * float(r @ r) / s2 - 0.5 * float(p0 @ (dm * dm))
            mu_c = Zc @ theta
            if mu_c.size:
                f += float(_censored_terms(mu_c, yc, is_oom, lo, hi, self.sigma_obs)[0].sum())
            return f, mu_c

        # Start: the exact-rows-only posterior mode (closed form), or the warm start.
        theta = linalg.cho_solve((chol_lower(He), True), be)
        f, mu_c = objective(theta)
        if warm is not None:
            fw, mu_w = objective(warm)
            if fw > f:
                theta, f, mu_c = warm.copy(), fw, mu_w

        converged = False
        it = 0
        L = None
        for it in range(1, self.max_iter + 1):
            grad = be - He @ theta
            H = He.copy()
            if mu_c.size:
                _, g, h = _censored_terms(mu_c, yc, is_oom, lo, hi, self.sigma_obs)
                grad += Zc.T @ g
                H += (Zc.T * (-h)) @ Zc
            L = chol_lower(H)
            step = linalg.cho_solve((L, True), grad, check_finite=False)
            decrement = float(grad @ step)
            if decrement <= self.tol * max(1.0, abs(f)) or decrement <= 1e-14:
                converged = True
                break
            t = 1.0
            while True:
                cand = theta + t * step
                fc, mu_cand = objective(cand)
                if fc >= f + 1e-4 * t * decrement or t < 1e-10:
                    break
                t *= 0.5
            if fc < f:  # no ascent possible at machine precision
                converged = True
                break
            theta, f, mu_c = cand, fc, mu_cand
        if not converged or L is None:
            grad = be - He @ theta
            H = He.copy()
            if mu_c.size:
                _, g, h = _censored_terms(mu_c, yc, is_oom, lo, hi, self.sigma_obs)
                H += (Zc.T * (-h)) @ Zc
            L = chol_lower(H)
        return theta, L, it, converged, f

    # ------------------------------------------------------------- prediction
    def _require_fit(self) -> None:
        if self._theta is None or self._L is None:
            raise SurrogateError("the memory model is not fitted; call fit first")

    @single_threaded
    def predict(self, X: ArrayLike, include_noise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Predicted per-GPU peak memory for each row of X, in model units (GiB, or ln GiB on the log scale).

        Args:
            X: m-by-d feature matrix (a 1-D vector is one row).
            include_noise: add sigma_obs^2 to the variance (predict one run's
                measured peak rather than the mean requirement).
        Returns: (mean_gib, sd_gib), two length-m arrays.
        """
        self._require_fit()
        A = as_matrix(X, "X", self._d)
        Z = np.hstack([np.ones((A.shape[0], 1)), A])
        mean = Z @ self._theta
        V = linalg.solve_triangular(self._L, Z.T, lower=True, check_finite=False)
        var = np.einsum("ij,ij->j", V, V)
        if include_noise:
            var = var + self.sigma_obs**2
        return mean, np.sqrt(var)

    @single_threaded
    def p_feasible(self, X: ArrayLike, limit_gib: float | None = None) -> np.ndarray:
        """Probability that each row's peak stays within ``limit_gib`` (default: capacity).

        Uses the Laplace predictive N(mean, sd^2 + sigma_obs^2).
        """
        mean, sd = self.predict(X, include_noise=True)
        limit = self._hi if limit_gib is None else self._to_model(float(limit_gib))
        return ndtr((limit - mean) / sd)

    @property
    def log_evidence(self) -> float:
        """Laplace approximation of ln p(y | model), as a density of the peaks in GiB.

        On the log scale the exact rows' Jacobian (-sum ln y) is included, so the evidences of a linear and a
        log-scale model of the same data are comparable (a Bayes factor).  Censored rows are probabilities and
        need none."""
        self._require_fit()
        exact = self._kinds == 0
        n_e = int(exact.sum())
        z = self.log_posterior_ - n_e * (math.log(self.sigma_obs) + _LOG_SQRT_2PI)
        z -= 0.5 * float(np.log(self._v0).sum()) + float(np.log(np.diag(self._L)).sum())
        if self.log_scale:
            z -= float(self._y[exact].sum())
        return z

    # ------------------------------------------------------------ inspection
    @property
    def intercept(self) -> float:
        """Posterior mean of the reference configuration's peak (GiB)."""
        self._require_fit()
        return float(self._theta[0])

    @property
    def coef_mean(self) -> np.ndarray:
        """Posterior mean GiB per feature (length d, intercept excluded)."""
        self._require_fit()
        return self._theta[1:].copy()

    @property
    @single_threaded
    def cov(self) -> np.ndarray:
        """Laplace covariance of (intercept, beta), (d+1)-by-(d+1)."""
        self._require_fit()
        Linv = linalg.solve_triangular(self._L, np.eye(self._L.shape[0]), lower=True)
        return Linv.T @ Linv

    @property
    def coef_sd(self) -> np.ndarray:
        """Laplace posterior SD per feature (length d)."""
        return np.sqrt(np.diag(self.cov))[1:]

    @property
    def intercept_sd(self) -> float:
        """Laplace posterior SD of the intercept."""
        return float(math.sqrt(self.cov[0, 0]))

    def feature_estimates(self, z: float = 2.0, min_gib: float = 0.0) -> list[FeatureMemoryEstimate]:
        """Per-feature GiB estimates with uncertainty and a spender/saver role.

        Args:
            z: how many posterior SDs the effect must clear to be classified.
            min_gib: smallest effect (GiB) that counts as spending or saving.
        Returns: one :class:`FeatureMemoryEstimate` per feature column.
        """
        mean, sd = self.coef_mean, self.coef_sd
        out = []
        for j in range(mean.shape[0]):
            if mean[j] - z * sd[j] > min_gib:
                role = "spender"
            elif mean[j] + z * sd[j] < -min_gib:
                role = "saver"
            else:
                role = "uncertain"
            out.append(FeatureMemoryEstimate(j, float(mean[j]), float(sd[j]), role))
        return out
