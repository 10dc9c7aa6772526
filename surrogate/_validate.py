"""Shared input checks for the surrogate models (internal)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from infrarsi.surrogate.errors import SurrogateError


def as_matrix(X: ArrayLike, name: str = "X", d: int | None = None) -> np.ndarray:
    """Return ``X`` as a finite float64 2-D array (a 1-D input is taken as one row).

    Raises SurrogateError if it is not 2-D, holds non-finite values, or has a
    column count different from ``d`` (when ``d`` is given).
    """
    A = np.asarray(X, dtype=np.float64)
    if A.ndim == 1:
        A = A.reshape(1, -1)
    if A.ndim != 2:
        raise SurrogateError(f"{name}: expected a 2-D matrix, got {A.ndim} dimensions")
    if d is not None and A.shape[1] != d:
        raise SurrogateError(f"{name}: expected {d} feature columns, got {A.shape[1]}")
    if not np.all(np.isfinite(A)):
        raise SurrogateError(f"{name}: contains NaN or infinite values")
    return A


def as_vector(y: ArrayLike, n: int, name: str = "y") -> np.ndarray:
    """Return ``y`` as a finite float64 vector of length ``n`` (SurrogateError otherwise)."""
    v = np.asarray(y, dtype=np.float64).reshape(-1)
    if v.shape[0] != n:
        raise SurrogateError(f"{name}: expected {n} values (one per row of X), got {v.shape[0]}")
    if not np.all(np.isfinite(v)):
        raise SurrogateError(f"{name}: contains NaN or infinite values")
    return v


def broadcast_param(value: ArrayLike, d: int, name: str, positive: bool = False) -> np.ndarray:
    """Broadcast a scalar or length-``d`` prior parameter to a float64 vector of length ``d``."""
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(d, float(v))
    v = v.reshape(-1)
    if v.shape[0] != d:
        raise SurrogateError(f"{name}: expected a scalar or {d} values, got {v.shape[0]}")
    if not np.all(np.isfinite(v)):
        raise SurrogateError(f"{name}: contains NaN or infinite values")
    if positive and np.any(v <= 0):
        raise SurrogateError(f"{name}: every entry must be > 0")
    return v
