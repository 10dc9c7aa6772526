"""Small dense linear-algebra helpers shared by the surrogate models (internal)."""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

from infrarsi.surrogate.errors import SurrogateError


def chol_lower(P: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of a symmetric PD matrix, adding jitter if round-off demands it."""
    try:
        return linalg.cholesky(P, lower=True, check_finite=False)
    except linalg.LinAlgError:
        scale = float(np.mean(np.diag(P))) or 1.0
        for eps in (1e-12, 1e-10, 1e-8, 1e-6):
            try:
                return linalg.cholesky(
                    P + eps * scale * np.eye(P.shape[0]), lower=True, check_finite=False
                )
            except linalg.LinAlgError:
                continue
        raise SurrogateError("posterior precision is not positive definite (check prior_var)")


def chol_rank_one_update(L: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Return the lower Cholesky factor of L L' + v v' (L is not modified). O(d^2)."""
    L = L.copy()
    v = np.array(v, dtype=np.float64)
    d = v.shape[0]
    for k in range(d):
        lkk = L[k, k]
        r = math.hypot(lkk, v[k])
        c, s = r / lkk, v[k] / lkk
        L[k, k] = r
        if k + 1 < d:
            col = (L[k + 1 :, k] + s * v[k + 1 :]) / c
            v[k + 1 :] = c * v[k + 1 :] - s * col
            L[k + 1 :, k] = col
    return L
