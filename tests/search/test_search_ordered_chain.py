"""Chained levels of an ordered knob in the time model (``TimeModel(chains=...)``, tuning key ``ordered_chain``).

Without chains every setting is its own indicator: a measured TP2 loss says nothing about TP4, so a batch of
eight proposals keeps drawing TP4 from its prior.  With chains TP4's effect is TP2's plus an increment; under
``chain_when="loss"`` only while TP2's estimate is a loss (past a level that hurts the next one out hurts too,
while a level that helps may sit at the peak of a unimodal curve)."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.controller.search.features import FeatureMap
from infrarsi.controller.search.models import TimeModel
from infrarsi.controller.search.space import KnobSpec, SearchSpace

SPACE = SearchSpace(knobs=(KnobSpec("tp", (1, 2, 4), 1, ordered=True), KnobSpec("flash", (False, True), False)))
FMAP = FeatureMap(SPACE)
TP2, TP4, FLASH = FMAP.index[("tp", 2)], FMAP.index[("tp", 4)], FMAP.index[("flash", True)]


def _model(y_tp2: float, **chain) -> TimeModel:
    m = TimeModel(FMAP, np.zeros(3), np.full(3, 0.1), 0.01 ** 2, 0.15, 0.02, **chain)
    X = np.zeros((2, FMAP.dim))
    X[0, TP2] = 1.0
    X[1, FLASH] = 1.0
    m.refit(X, np.array([y_tp2, 0.05]))
    return m


@pytest.mark.parametrize("when", ["always", "loss"])
def test_a_measured_loss_at_tp2_moves_tp4(when: str) -> None:
    plain = _model(-0.08)
    chained = _model(-0.08, chains=[[TP2, TP4]], chain_rho=0.7, chain_when=when)
    (m0, s0), (m1, s1) = plain.coef(), chained.coef()
    assert m0[TP4] == pytest.approx(0.0, abs=1e-6)  # the indicator model learns nothing about TP4
    assert m1[TP4] < -0.05 and m1[TP2] == pytest.approx(m0[TP2], abs=0.01)
    assert m1[FLASH] == pytest.approx(m0[FLASH], abs=1e-9)  # other knobs are untouched
    x = np.zeros((1, FMAP.dim))
    x[0, TP4] = 1.0
    mean, sd = chained.predict(x)
    assert mean[0] == pytest.approx(m1[TP4], abs=1e-9) and sd[0] == pytest.approx(s1[TP4], abs=1e-6)
    draws = np.array([chained.coef_sample(np.random.default_rng(i))[TP4] for i in range(400)])
    assert abs(draws.mean() - m1[TP4]) < 0.02  # Thompson draws follow the chained posterior


def test_a_measured_gain_at_tp2_is_not_extrapolated_under_loss() -> None:
    always = _model(0.08, chains=[[TP2, TP4]], chain_rho=0.7, chain_when="always")
    loss = _model(0.08, chains=[[TP2, TP4]], chain_rho=0.7, chain_when="loss")
    assert always.coef()[0][TP4] > 0.05
    assert loss.links == [] and loss.coef()[0][TP4] == pytest.approx(0.0, abs=1e-6)


def test_the_controller_builds_one_chain_per_side_of_the_reference() -> None:
    from infrarsi.controller.search.controller import SearchController
    from tests.search.conftest import make_noise

    space = SearchSpace(knobs=(KnobSpec("mbs", (1, 2, 4, 8), 2, ordered=True), KnobSpec("tp", (1, 2), 1, ordered=True)))
    c = SearchController(space, make_noise(), 1.0, 80.0, seed=0, ordered_chain=0.7)
    idx = c.fmap.index
    assert c._ordered_chains() == [[idx[("mbs", 4)], idx[("mbs", 8)]]]  # mbs 1 alone below; tp has one level
    assert c.time.links == [(idx[("mbs", 4)], idx[("mbs", 8)])]


def test_fantasized_refits_restore_the_links_with_the_model() -> None:
    """Under ``loss`` the links are part of the fit: a fantasized refit (busy trials told at their predicted
    means) that changes them must not leave them beside the restored real model, whose coefficients are
    increments over the old links."""
    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.space import Candidate, Outcome
    from tests.search.conftest import make_noise

    c = SearchController(SPACE, make_noise(), 1.0, 80.0, seed=0, ordered_chain=0.7, ordered_chain_when="loss")
    tp2 = Candidate.from_dict({"tp": 2, "flash": False})
    c.tell(tp2, Outcome(status="ok", step_time_s=1.08, peak_mem_gib=40.0))  # TP2 loses: TP4 is chained to it
    assert c.time.links == [(TP2, TP4)]
    before = c.time.predict(FMAP.encode([Candidate.from_dict({"tp": 4, "flash": False})]))
    busy = {Candidate.from_dict({"tp": 2, "flash": True})}
    with c._fantasized(busy):
        c.time.refit(np.zeros((0, FMAP.dim)), np.zeros(0))  # a refit in the block that drops the link
        assert c.time.links == []
    assert c.time.links == [(TP2, TP4)]
    after = c.time.predict(FMAP.encode([Candidate.from_dict({"tp": 4, "flash": False})]))
    assert np.allclose(before, after)
