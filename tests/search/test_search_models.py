"""The search's model glue (controller/search/models.py): decisions do not depend on the CPU's last bits.

BLAS/LAPACK pick kernels per CPU (AVX2 on one machine, AVX-512 on the next), and their results differ in
the last bits.  Before the model outputs were rounded, one seeded moe_memory_cliff benchmark at slots 4
reached 90% of the peak at trial 4 on one kernel and at trial 13 on another.  The attack-free stand-in
for "another machine" here: every surrogate output nudged by ~1e-13 relative, differently per row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infrarsi.controller.search import models
from infrarsi.controller.search.benchmark import simulate_campaign
from infrarsi.controller.search.landscape import load_landscape
from infrarsi.surrogate.memory_model import TobitMemoryModel
from infrarsi.surrogate.time_model import BayesLinearTimeModel

ROOT = Path(__file__).resolve().parents[2]
EPS = 1e-13


def _wiggle(x: np.ndarray) -> np.ndarray:
    """``x`` moved by about EPS relative, a different direction per element (another CPU's rounding)."""
    x = np.asarray(x, dtype=float)
    return x * (1.0 + EPS * np.sin(np.arange(x.size).reshape(x.shape) * 12.9898 + 0.5))


@pytest.fixture
def other_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    time_predict, mem_predict = BayesLinearTimeModel.predict, TobitMemoryModel.predict
    time_coef = BayesLinearTimeModel.coef_mean.fget
    monkeypatch.setattr(BayesLinearTimeModel, "predict",
                        lambda self, X, include_noise=False: tuple(map(_wiggle, time_predict(self, X, include_noise))))
    monkeypatch.setattr(TobitMemoryModel, "predict",
                        lambda self, X, include_noise=False: tuple(map(_wiggle, mem_predict(self, X, include_noise))))
    monkeypatch.setattr(BayesLinearTimeModel, "coef_mean", property(lambda self: _wiggle(time_coef(self))))


def _trials(slots: int) -> list:
    land = load_landscape(ROOT / "bench" / "landscapes" / "moe_memory_cliff.py")
    camp = simulate_campaign(land, "infrarsi", seed=0, trials=12, slots=slots)
    return [(cand, out.status) for cand, out in camp.result.trials]


def test_outputs_are_rounded_to_the_stated_decimals():
    x = np.array([0.1234567890123456, 1.0 + 3e-12, -2e-10])
    assert np.array_equal(models.stable(x), np.round(x, models.DECIMALS))
    assert models.stable(x)[1] == 1.0 and models.stable(x)[2] == 0.0


def test_last_bit_differences_do_not_change_a_seeded_search(request: pytest.FixtureRequest):
    here = _trials(4)
    request.getfixturevalue("other_cpu")
    assert _trials(4) == here


def test_without_the_rounding_the_same_nudge_changes_the_search(request: pytest.FixtureRequest,
                                                                monkeypatch: pytest.MonkeyPatch):
    """The attack the rounding stops: without it the nudge above flips a tie and the trial sequence forks."""
    monkeypatch.setattr(models, "stable", lambda x: np.asarray(x, dtype=float))
    here = _trials(4)
    request.getfixturevalue("other_cpu")
    assert _trials(4) != here
