"""Tests for infrarsi.surrogate._blas: single-threaded BLAS inside model calls, restored after."""

from __future__ import annotations

import numpy as np

from infrarsi.surrogate import BayesLinearTimeModel
from infrarsi.surrogate._blas import _get_setters, one_thread


def test_one_thread_restores_previous_setting_and_keeps_results() -> None:
    setters = _get_setters()
    assert setters, "numpy/scipy wheels from PyPI bundle OpenBLAS; none was found"
    before = [fn(3) for fn in setters]  # set 3, remember the old value
    try:
        with one_thread():
            inside = [fn(1) for fn in setters]
            assert all(v == 1 for v in inside)
        after = [fn(3) for fn in setters]
        assert all(v == 3 for v in after)
    finally:
        for fn, prev in zip(setters, before):
            if prev > 0:
                fn(prev)
    rng = np.random.default_rng(0)
    X = (rng.random((300, 80)) < 0.2).astype(float)
    y = X @ rng.normal(0, 0.05, 80)
    a = BayesLinearTimeModel(0.0, 0.01, 1e-4).fit(X, y).coef_mean
    b = BayesLinearTimeModel.fit.__wrapped__(BayesLinearTimeModel(0.0, 0.01, 1e-4), X, y).coef_mean
    np.testing.assert_allclose(a, b, atol=1e-10)
