"""Bayesian linear step-time surrogate (paper section 4.1, "Global Time ... Models").

Model: y = ln(T0 / T) = x . beta + eps, eps ~ N(0, noise_var), where x is a
row of 0/1 indicator features (each non-reference knob setting, each verified
source patch, and any enabling pairs the caller adds as extra columns) and T0
is the reference step time.  There is no intercept: the reference
configuration (all features 0) has log-speedup 0 by definition; a caller that
wants to absorb a drifting baseline can add a constant column.

Prior: beta_j ~ N(mu0_j, s0_j^2) independently, with the prior standard
deviation floored at ``max(sigma_min, 0.5 * |mu0_j|)`` (section 4.2) so that
a confident-looking but miscalibrated prior cannot hide a lever.

Posterior (closed form): precision P = diag(1/s0^2) + X'X / noise_var,
mean m = P^-1 (diag(1/s0^2) mu0 + X'y / noise_var).  P is held through its
lower Cholesky factor; :meth:`BayesLinearTimeModel.update` adds one
observation with an O(d^2) rank-one update of the factor.  Only the
sufficient statistics X'X, X'y, n are kept, so the prior can be replaced
(empirical-Bayes revision) and the posterior re-solved in place.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg

from infrarsi.surrogate._blas import single_threaded
from infrarsi.surrogate._linalg import chol_lower as _chol_lower
from infrarsi.surrogate._linalg import chol_rank_one_update
from infrarsi.surrogate._validate import as_matrix, as_vector, broadcast_param
from infrarsi.surrogate.errors import SurrogateError
from infrarsi.surrogate.priors import PriorRevision, empirical_bayes_revision, floor_prior_sd

#: Default smallest prior SD of a coefficient, in log-speedup units.
DEFAULT_SIGMA_MIN = 0.02


class BayesLinearTimeModel:
    """Conjugate Gaussian linear model of log-speedup over indicator features.

    Args:
        prior_mean: mu0, a scalar or one value per feature (log-speedup).  A
            scalar is broadcast once the feature count is known (first fit).
        prior_var: s0^2, a scalar or one value per feature, > 0.  Floored so
            that s0 >= max(sigma_min, 0.5 * |mu0|).
        noise_var: variance of one trial's measured log-speedup (> 0); the
            calibrated paired noise ``sigma_pair ** 2`` is the natural value.
        sigma_min: smallest allowed prior SD.

    Raises:
        SurrogateError: non-finite or non-positive variances, shape mismatch.
    """

    @single_threaded
    def __init__(
        self,
        prior_mean: ArrayLike,
        prior_var: ArrayLike,
        noise_var: float,
        sigma_min: float = DEFAULT_SIGMA_MIN,
    ) -> None:
        if not (math.isfinite(noise_var) and noise_var > 0):
            raise SurrogateError(f"noise_var: must be finite and > 0, got {noise_var!r}")
        if not (math.isfinite(sigma_min) and sigma_min > 0):
            raise SurrogateError(f"sigma_min: must be finite and > 0, got {sigma_min!r}")
        self.noise_var = float(noise_var)
        self.sigma_min = float(sigma_min)
        self._raw_mean = np.asarray(prior_mean, dtype=np.float64)
        self._raw_var = np.asarray(prior_var, dtype=np.float64)
        self._d: int | None = None
        for name, raw in (("prior_mean", self._raw_mean), ("prior_var", self._raw_var)):
            if raw.ndim > 1:
                raise SurrogateError(f"{name}: expected a scalar or a 1-D vector")
        if self._raw_mean.ndim == 1:
            self._set_dim(self._raw_mean.shape[0])
        elif self._raw_var.ndim == 1:
            self._set_dim(self._raw_var.shape[0])
        else:
            broadcast_param(self._raw_var, 1, "prior_var", positive=True)
            broadcast_param(self._raw_mean, 1, "prior_mean")

    # ----------------------------------------------------------------- set-up
    def _set_dim(self, d: int) -> None:
        mu0 = broadcast_param(self._raw_mean, d, "prior_mean")
        var0 = broadcast_param(self._raw_var, d, "prior_var", positive=True)
        self._d = d
        self._llm_mean = mu0.copy()
        self._llm_sd = np.sqrt(var0)
        self._mu0 = mu0
        sd0 = floor_prior_sd(mu0, np.sqrt(var0), self.sigma_min)
        self._var0 = sd0 * sd0
        self._XtX = np.zeros((d, d))
        self._Xty = np.zeros(d)
        self._yty = 0.0
        self._n = 0
        self._solve()

    def _require_dim(self, d: int) -> None:
        if self._d is None:
            self._set_dim(d)
        elif d != self._d:
            raise SurrogateError(f"X: expected {self._d} feature columns, got {d}")

    def _solve(self) -> None:
        """Refactor the precision from the sufficient statistics; state changes only on success."""
        P = self._XtX / self.noise_var
        P[np.diag_indices_from(P)] += 1.0 / self._var0
        L = _chol_lower(P)
        rhs = self._mu0 / self._var0 + self._Xty / self.noise_var
        self._mean = linalg.cho_solve((L, True), rhs, check_finite=False)
        self._L, self._rhs = L, rhs

    # --------------------------------------------------------------- fitting
    @single_threaded
    def fit(self, X: ArrayLike, y: ArrayLike) -> "BayesLinearTimeModel":
        """Replace all data with (X, y) and solve the posterior.

        Args:
            X: n-by-d feature matrix (n may be 0: the posterior is the prior).
            y: n measured log-speedups ln(T0/T).

        Returns: self.  Raises SurrogateError on shape or finiteness errors.
        Collinear or duplicated columns are fine: the prior keeps the
        precision positive definite.
        """
        A = np.asarray(X, dtype=np.float64)
        if A.ndim == 2 and A.shape[0] == 0:
            self._require_dim(A.shape[1])
            v = np.zeros(0)
        else:
            A = as_matrix(X, "X", self._d)
            v = as_vector(y, A.shape[0], "y")
            self._require_dim(A.shape[1])
        saved = (self._XtX, self._Xty, self._yty, self._n)
        self._XtX = A.T @ A
        self._Xty = A.T @ v
        self._yty = float(v @ v)
        self._n = A.shape[0]
        try:
            self._solve()
        except SurrogateError:
            self._XtX, self._Xty, self._yty, self._n = saved  # keep the previous posterior
            raise
        return self

    @single_threaded
    def update(self, x: ArrayLike, y: float) -> "BayesLinearTimeModel":
        """Add one observation incrementally (rank-one Cholesky update, O(d^2)).

        Args:
            x: one feature row of length d.
            y: its measured log-speedup.

        Returns: self; the posterior equals a full refit on all rows seen.
        """
        row = as_matrix(x, "x", self._d)
        if row.shape[0] != 1:
            raise SurrogateError(f"x: expected one feature row, got {row.shape[0]}")
        yv = float(as_vector(np.atleast_1d(y), 1, "y")[0])
        self._require_dim(row.shape[1])
        r = row[0]
        self._XtX += np.outer(r, r)
        self._Xty += r * yv
        self._yty += yv * yv
        self._n += 1
        self._L = chol_rank_one_update(self._L, r / math.sqrt(self.noise_var))
        self._rhs = self._rhs + r * (yv / self.noise_var)
        self._mean = linalg.cho_solve((self._L, True), self._rhs, check_finite=False)
        return self

    # ------------------------------------------------------------ prediction
    @single_threaded
    def predict(self, X: ArrayLike, include_noise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Posterior predictive log-speedup for each row of X.

        Args:
            X: m-by-d feature matrix (a 1-D vector is one row).
            include_noise: add ``noise_var`` (predict a new measurement rather
                than the underlying mean).

        Returns:
            (mean, var), two length-m arrays; var is the posterior variance of
            x . beta (plus noise_var if requested).
        """
        if self._d is None:
            raise SurrogateError("predict: the model has no feature dimension yet; call fit first")
        A = as_matrix(X, "X", self._d)
        mean = A @ self._mean
        V = linalg.solve_triangular(self._L, A.T, lower=True, check_finite=False)
        var = np.einsum("ij,ij->j", V, V)
        if include_noise:
            var = var + self.noise_var
        return mean, var

    # ------------------------------------------------------------ inspection
    @property
    def dim(self) -> int | None:
        """Number of features d (None until known)."""
        return self._d

    @property
    def n_obs(self) -> int:
        """Number of observations in the posterior."""
        return self._n

    @property
    def coef_mean(self) -> np.ndarray:
        """Posterior mean of beta (length d)."""
        return self._mean.copy()

    @property
    @single_threaded
    def coef_cov(self) -> np.ndarray:
        """Posterior covariance of beta (d-by-d), from the Cholesky factor."""
        Linv = linalg.solve_triangular(self._L, np.eye(self._L.shape[0]), lower=True)
        return Linv.T @ Linv

    @property
    @single_threaded
    def coef_sd(self) -> np.ndarray:
        """Posterior SD of each coefficient."""
        Linv = linalg.solve_triangular(self._L, np.eye(self._L.shape[0]), lower=True)
        return np.sqrt(np.einsum("ij,ij->j", Linv, Linv))

    def lever_gains(self, ceiling: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Single-lever predicted log-speedups, capped by an Amdahl phase-headroom ceiling.

        Args:
            ceiling: None, a scalar, or one ceiling per feature (log-speedup,
                e.g. from :func:`infrarsi.surrogate.amdahl.amdahl_ceiling`; inf = none).
        Returns:
            (gain, sd): min(posterior mean, ceiling) and the posterior SD per feature.
        """
        if self._d is None:
            raise SurrogateError("lever_gains: the model has no feature dimension yet")
        mean = self._mean.copy()
        if ceiling is not None:
            cap = np.asarray(ceiling, dtype=np.float64)
            cap = np.full(self._d, float(cap)) if cap.ndim == 0 else cap.reshape(-1)
            if cap.shape[0] != self._d or np.any(np.isnan(cap)):
                raise SurrogateError(f"ceiling: expected a scalar or {self._d} non-NaN values")
            mean = np.minimum(mean, cap)
        return mean, self.coef_sd

    @property
    def prior_mean(self) -> np.ndarray:
        """The prior mean currently in use (after any revision)."""
        return self._mu0.copy()

    @property
    def prior_var(self) -> np.ndarray:
        """The prior variance currently in use (after flooring)."""
        return self._var0.copy()

    # -------------------------------------------------------- prior handling
    @single_threaded
    def set_prior(self, prior_mean: ArrayLike, prior_var: ArrayLike) -> "BayesLinearTimeModel":
        """Replace the prior (floored as in the constructor) and re-solve in place.

        The data already absorbed are kept.  Returns self.
        """
        if self._d is None:
            raise SurrogateError("set_prior: the model has no feature dimension yet")
        mu0 = broadcast_param(prior_mean, self._d, "prior_mean")
        var0 = broadcast_param(prior_var, self._d, "prior_var", positive=True)
        self._mu0 = mu0
        sd0 = floor_prior_sd(mu0, np.sqrt(var0), self.sigma_min)
        self._var0 = sd0 * sd0
        self._solve()
        return self

    @single_threaded
    def set_noise_var(self, noise_var: float) -> "BayesLinearTimeModel":
        """Replace the observation noise variance (e.g. after re-calibration) and re-solve.

        Returns self.  Raises SurrogateError unless noise_var is finite and > 0.
        """
        if not (math.isfinite(noise_var) and noise_var > 0):
            raise SurrogateError(f"noise_var: must be finite and > 0, got {noise_var!r}")
        self.noise_var = float(noise_var)
        if self._d is not None:
            self._solve()
        return self

    @single_threaded
    def data_estimates(self, vague_var: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the data alone say about each coefficient.

        Solves the posterior under a vague N(0, vague_var) prior on every
        coefficient (so collinear designs stay solvable).

        Returns:
            (estimate, variance, informed): informed[j] is True where the
            data shrink the variance below half of vague_var.
        """
        if self._d is None:
            raise SurrogateError("data_estimates: the model has no data yet")
        P = self._XtX / self.noise_var + np.eye(self._d) / vague_var
        L = _chol_lower(P)
        est = linalg.cho_solve((L, True), self._Xty / self.noise_var, check_finite=False)
        Linv = linalg.solve_triangular(L, np.eye(self._d), lower=True)
        var = np.einsum("ij,ij->j", Linv, Linv)
        return est, var, var < 0.5 * vague_var

    @single_threaded
    def revise_prior(self, min_informed: int = 3) -> PriorRevision:
        """Empirical-Bayes prior revision, re-solving the posterior in place.

        Fits how the original (e.g. LLM-rated) prior levels relate to what the
        measurements say (:func:`infrarsi.surrogate.priors.empirical_bayes_revision`),
        moves every prior level onto that calibration line, sets the prior
        spread to the measured residual spread (floored), and re-solves.  The
        revision always starts from the constructor's prior levels, so calling
        it repeatedly does not compound.  Returns the revision record.
        """
        if self._d is None:
            raise SurrogateError("revise_prior: the model has no feature dimension yet")
        est, var, informed = self.data_estimates()
        rev = empirical_bayes_revision(
            self._llm_mean,
            self._llm_sd,
            est,
            var,
            informed,
            sigma_min=self.sigma_min,
            min_informed=min_informed,
        )
        self.set_prior(rev.mean, rev.sd**2)
        return rev
