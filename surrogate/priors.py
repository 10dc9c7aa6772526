"""Prior handling and empirical-Bayes revision (paper section 4.2).

Zero-shot LLM priors on knob effects correlate poorly with measurements, and
LLM predictions of patch gains are optimistic.  This module holds the three
rules the search applies to them:

* :func:`floor_prior_sd`: a prior SD is never below max(sigma_min, 0.5|mu0|).
* :func:`shrink_patch_prior`: mu_patch = kappa0 * mu_LLM (and
  :func:`revise_kappa` to re-estimate kappa from verified patches).
* :func:`empirical_bayes_revision`: fit how prior levels relate to measured
  effects across the features that have been measured (a calibration line
  est ~ a + b * mu0 with residual spread tau), move every prior level onto it
  and set the prior spread to tau.  Unmeasured features inherit the
  calibration, so a prior that is systematically off is corrected everywhere.

Everything here is numpy only, pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from infrarsi.surrogate._validate import broadcast_param
from infrarsi.surrogate.errors import SurrogateError

#: Default LLM patch-gain shrinkage factor kappa0 (conservative: halve claims).
DEFAULT_KAPPA0 = 0.5


def floor_prior_sd(prior_mean: ArrayLike, prior_sd: ArrayLike, sigma_min: float) -> np.ndarray:
    """Return max(prior_sd, sigma_min, 0.5 * |prior_mean|) elementwise.

    Args: prior_mean and prior_sd broadcastable arrays; sigma_min > 0.
    Returns: a float64 array of the broadcast shape.
    """
    mu = np.asarray(prior_mean, dtype=np.float64)
    sd = np.asarray(prior_sd, dtype=np.float64)
    return np.maximum(np.maximum(sd, sigma_min), 0.5 * np.abs(mu))


def shrink_patch_prior(
    mu_llm: ArrayLike, kappa0: float = DEFAULT_KAPPA0, sigma_min: float = 0.02
) -> tuple[np.ndarray, np.ndarray]:
    """Prior for LLM-proposed source patches: mean kappa0 * mu_LLM, floored SD.

    Args:
        mu_llm: the LLM's predicted log-speedup per patch.
        kappa0: shrinkage factor in [0, 1].
        sigma_min: smallest prior SD.

    Returns: (mean, sd) arrays; sd = max(sigma_min, 0.5 * |mean|).
    Raises: SurrogateError if kappa0 is outside [0, 1] or mu_llm is not finite.
    """
    if not 0.0 <= kappa0 <= 1.0:
        raise SurrogateError(f"kappa0: must be in [0, 1], got {kappa0!r}")
    mu = np.asarray(mu_llm, dtype=np.float64)
    if not np.all(np.isfinite(mu)):
        raise SurrogateError("mu_llm: contains NaN or infinite values")
    mean = kappa0 * mu
    return mean, floor_prior_sd(mean, 0.0, sigma_min)


def revise_kappa(
    mu_llm: ArrayLike,
    measured: ArrayLike,
    measured_var: ArrayLike,
    kappa0: float = DEFAULT_KAPPA0,
    pseudo_count: float = 3.0,
) -> float:
    """Re-estimate the patch shrinkage factor from verified patches.

    A weighted least-squares slope of measured on predicted gains (through the
    origin), combined with kappa0 as if kappa0 had been seen on
    ``pseudo_count`` average patches, clipped to [0, 1].

    Args:
        mu_llm, measured, measured_var: equal-length vectors for the verified
            patches (measured log-speedup and its variance > 0).
        kappa0: the prior shrinkage factor; returned unchanged with no data.
        pseudo_count: weight of kappa0 in patches.
    Returns: the revised kappa in [0, 1].
    """
    x = np.asarray(mu_llm, dtype=np.float64).reshape(-1)
    y = np.asarray(measured, dtype=np.float64).reshape(-1)
    v = broadcast_param(measured_var, x.shape[0], "measured_var", positive=True)
    if y.shape[0] != x.shape[0]:
        raise SurrogateError("measured: must have one value per entry of mu_llm")
    if x.size == 0 or not np.any(x != 0):
        return float(kappa0)
    w = 1.0 / v
    sxx = float(np.sum(w * x * x))
    sxy = float(np.sum(w * x * y))
    prior_w = pseudo_count * sxx / x.size
    kappa = (sxy + prior_w * kappa0) / (sxx + prior_w)
    return float(np.clip(kappa, 0.0, 1.0))


@dataclass(frozen=True)
class PriorRevision:
    """Result of an empirical-Bayes prior revision.

    Attributes:
        mean, sd: the revised prior (use these to re-solve a model that already
            holds the measurements; they do not double-count them).
        carried_mean, carried_sd: the revised prior combined with each
            measured feature's own estimate (use these to seed a *fresh* model
            or the experience bank, which will not see the measurements again).
        intercept, slope: calibration line est ~ intercept + slope * mu0.
        tau: residual spread of measured effects around the line.
        n_informed: features that carried measurements.
        revised: False when too few features were measured; the prior is then
            returned unchanged (floored).
    """

    mean: np.ndarray
    sd: np.ndarray
    carried_mean: np.ndarray
    carried_sd: np.ndarray
    intercept: float
    slope: float
    tau: float
    n_informed: int
    revised: bool


def empirical_bayes_revision(
    prior_mean: ArrayLike,
    prior_sd: ArrayLike,
    estimate: ArrayLike,
    estimate_var: ArrayLike,
    informed: ArrayLike | None = None,
    sigma_min: float = 0.02,
    min_informed: int = 3,
    max_slope: float = 1.0,
) -> PriorRevision:
    """Move prior levels toward what measurements say about them.

    Args:
        prior_mean, prior_sd: the original prior per feature (length d).
        estimate, estimate_var: the data-only estimate of each effect and its
            variance (e.g. BayesLinearTimeModel.data_estimates()); entries of
            uninformed features are ignored.
        informed: boolean mask of features with measurements (default: finite
            estimate_var).
        sigma_min: smallest prior SD after revision.
        min_informed: fewest informed features needed to fit the line; with
            fewer, the prior levels are kept.
        max_slope: the calibration slope is clipped to [0, max_slope]: a prior
            that anti-correlates with measurements is ignored rather than
            inverted, and prior claims are never amplified beyond max_slope.

    Returns: a :class:`PriorRevision`.
    Raises: SurrogateError on shape mismatch or non-finite inputs.
    """
    mu0 = np.asarray(prior_mean, dtype=np.float64).reshape(-1)
    d = mu0.shape[0]
    sd0 = broadcast_param(prior_sd, d, "prior_sd")
    est = np.asarray(estimate, dtype=np.float64).reshape(-1)
    var = np.asarray(estimate_var, dtype=np.float64).reshape(-1)
    if est.shape[0] != d or var.shape[0] != d:
        raise SurrogateError(f"estimate/estimate_var: expected {d} values each")
    mask = np.isfinite(var) if informed is None else np.asarray(informed, dtype=bool).reshape(-1)
    if mask.shape[0] != d:
        raise SurrogateError(f"informed: expected {d} flags")
    mask = mask & np.isfinite(est) & np.isfinite(var) & (var > 0)
    k = int(mask.sum())

    if k < max(min_informed, 1):
        sd = floor_prior_sd(mu0, sd0, sigma_min)
        a, b, tau = 0.0, 1.0, float("nan")
        mean = mu0.copy()
        revised = False
    else:
        x, y, v = mu0[mask], est[mask], var[mask]
        tau2 = float(np.var(y))
        a, b = 0.0, 1.0
        for _ in range(20):
            w = 1.0 / (v + tau2)
            if np.ptp(x) > 1e-12 and k >= 3:
                sw = w.sum()
                xm, ym = (w @ x) / sw, (w @ y) / sw
                b = float((w * (x - xm)) @ (y - ym) / ((w * (x - xm)) @ (x - xm)))
                b = float(np.clip(b, 0.0, max_slope))
                a = float(ym - b * xm)
            else:
                b = float(np.clip(1.0, 0.0, max_slope))
                a = float((w @ (y - b * x)) / w.sum())
            r = y - a - b * x
            n_par = 2 if k >= 3 else 1
            new_tau2 = max(0.0, float(np.sum(r * r - v)) / max(k - n_par, 1))
            if abs(new_tau2 - tau2) <= 1e-12 + 1e-6 * tau2:
                tau2 = new_tau2
                break
            tau2 = new_tau2
        tau = float(np.sqrt(tau2))
        mean = a + b * mu0
        sd = floor_prior_sd(mean, tau, sigma_min)
        revised = True

    prec = 1.0 / (sd * sd)
    carried_mean = mean.copy()
    carried_sd = sd.copy()
    if k:
        pm = prec[mask] + 1.0 / var[mask]
        carried_mean[mask] = (prec[mask] * mean[mask] + est[mask] / var[mask]) / pm
        carried_sd[mask] = np.sqrt(1.0 / pm)
    return PriorRevision(
        mean=mean,
        sd=sd,
        carried_mean=carried_mean,
        carried_sd=carried_sd,
        intercept=a,
        slope=b,
        tau=tau,
        n_informed=k,
        revised=revised,
    )
