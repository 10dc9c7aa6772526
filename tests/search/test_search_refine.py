"""Refining an experience start (controller/search/refine.py): active only with transferred experience."""

from __future__ import annotations

import math

from infrarsi.controller.search import refine
from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.space import Outcome

from tests.search.conftest import make_noise, toy_space


def ok(y: float, mem: float = 70.0) -> Outcome:
    return Outcome("ok", step_time_s=math.exp(-y), peak_mem_gib=mem, gpu_hours=0.1)


#: what retrieval hands the search (controller/experience/retrieval.py): a start, a covered signed prior of
#: compile, a partial (sign-free, another SKU) record of algo=tree
TRANSFERRED = [{"config": {"compile": True}, "speedup": 1.1},
               {"knob": "compile", "value": True, "log_speedup": 0.09, "prior_sd": 0.03, "records": 1,
                "coverage": "covered", "distance": 1.0},
               {"knob": "algo", "value": "tree", "records": 1, "coverage": "partial", "distance": 1.0}]


def ctrl(experience=None, seed: int = 0) -> SearchController:
    return SearchController(toy_space(), make_noise(), 1.0, 80.0, seed=seed, reference_peak_mem_gib=70.0,
                            experience=experience)


def stall(c: SearchController, n: int = 2) -> None:
    """Tell ``n`` non-improving trials that are no start (the escape threshold is ``stall_trials`` = 2)."""
    for v in (4, 8)[:n]:
        c.tell(c.reference.with_values({"workers": v}), ok(0.0))


def sweep(c: SearchController) -> list:
    return [cand for _, cand in refine.refine_sweep(c.view, set())]


def test_inactive_without_transferred_experience():
    assert not refine.active(ctrl().view)  # cold
    assert not refine.active(ctrl([{"config": {"compile": True}, "speedup": 1.1}]).view)  # a start, no records
    all_mode = [{"config": {"compile": True}, "speedup": 1.1},  # retrieval mode "all": covered at distance 0
                {"knob": "compile", "value": True, "log_speedup": 0.09, "prior_sd": 0.03, "coverage": "covered",
                 "distance": 0.0}]
    c = ctrl(all_mode)
    assert not refine.active(c.view)
    c.tell(c.starts[0], ok(0.1))
    stall(c)
    assert sweep(c) == []
    assert refine.active(ctrl(TRANSFERRED).view)


def test_sweeps_uncovered_knobs_one_at_a_time_from_the_experience_start():
    c = ctrl(TRANSFERRED)
    start = c.starts[0]
    assert start.value("compile") is True
    c.tell(start, ok(0.1))
    assert sweep(c) == []  # not stalled yet: the usual operators run
    stall(c)
    assert c.stall >= 2 and c.incumbent == start
    got = sweep(c)
    assert got, "a stalled experience incumbent with untried uncovered levers is refined, not escaped"
    for cand in got:
        assert cand.value("compile") is True  # the covered setting is kept
        moved = {k.name for k in c.space.knobs if cand.value(k.name) != start.value(k.name)}
        assert moved and "compile" not in moved
        assert len(moved) <= 2  # one lever (plus a memory saver when the model predicts an OOM)
    # a setting measured apart here (two ok trials differing in exactly it) is not swept again
    tree = start.with_values({"algo": "tree"})
    assert tree in got
    c.tell(tree, ok(0.1))  # no better: the incumbent stays, algo=tree is now measured apart
    assert c.incumbent == start and refine.measured_apart(c.view, ("algo", "tree"))
    assert all(cand.value("algo") != "tree" for cand in sweep(c))


def test_grafts_covered_settings_onto_an_incumbent_from_another_start():
    c = ctrl(TRANSFERRED)
    other = c.reference.with_values({"algo": "tree"})
    c.tell(other, ok(0.12))
    stall(c)
    assert c.incumbent == other
    got = sweep(c)
    assert other.with_values({"compile": True}) in got


def test_refine_runs_before_escape_and_ask_stays_pure():
    """Stalled on the experience start, ``ask`` refines instead of escaping; a replayed controller asks the same."""
    def build() -> SearchController:
        return SearchController(toy_space(patches=()), make_noise(), 1.0, 80.0, seed=3,
                                reference_peak_mem_gib=70.0, experience=TRANSFERRED)

    c = build()
    c.tell(c.starts[0], ok(0.1))
    stall(c)
    ops = []
    for _ in range(3):
        (cand,) = c.ask(1)
        ops.append(c.proposed_by[cand])
        c.tell(cand, ok(0.05))  # none improves: the sweep goes on over the untried uncovered levers
    assert "refine" in ops and "escape" not in ops and "restart" not in ops
    r = build()
    for cand, out in c.history:
        r.tell(cand, out)
    assert r.ask(1) == c.ask(1)
    cold = SearchController(toy_space(patches=()), make_noise(), 1.0, 80.0, seed=3, reference_peak_mem_gib=70.0)
    cold.tell(c.starts[0], ok(0.1))
    stall(cold)
    for _ in range(3):  # without experience the same history escapes, as before
        (cand,) = cold.ask(1)
        cold.tell(cand, ok(0.05))
    assert "refine" not in cold.proposed_by.values()
