"""The budget with trials in flight: the promotion reserved up front, in-flight trials at their expected cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.campaign.budget import budget_view
from tests.campaign.engine_world import World, make_world, run_until


def _rows(ref: list[float], search: list[float]) -> list[dict]:
    rows = []
    if ref:
        rows.append({"stage": "reference", "entries": len(ref), "gpu_hours": sum(ref), "cpu_hours": 0.0})
    if search:
        rows.append({"stage": "search", "entries": len(search), "gpu_hours": sum(search), "cpu_hours": 0.0})
    rows.append({"stage": "search", "entries": 3, "gpu_hours": 0.0, "cpu_hours": 0.0, "llm_tokens": 900})
    return rows


def test_the_two_h200_overrun_cannot_happen() -> None:
    """The issue's case: 0.17 GPU-h budget, two references at 0.02 each, search trials ~0.01, 2 slots, a promotion
    of 2 candidates x 2 pairs.  The old rule launched while spent < budget and ended at 0.273."""
    v = budget_view(0.17, _rows([0.02, 0.02], []), in_flight=0, promotion_runs=8)
    assert v.per_search_trial == pytest.approx(0.02)  # no search trial yet: the reference's mean, erring high
    assert v.reserve == pytest.approx(8 * 0.02)
    assert v.search_slots() == 0  # 0.04 spent + 0.16 reserved already exceeds 0.17: search nothing, verify
    v = budget_view(0.40, _rows([0.02, 0.02], [0.01, 0.01]), in_flight=2, promotion_runs=8)
    assert v.per_search_trial == pytest.approx(0.01) and v.reserve == pytest.approx(4 * 0.02 + 4 * 0.01)
    assert v.committed == pytest.approx(0.06 + 0.02 + 0.12)
    assert v.search_slots() == 20  # (0.40 - 0.20) / 0.01
    assert "promotion reserve" in v.describe()


def test_reserve_shrinks_as_the_promotion_runs_and_language_model_rows_are_ignored() -> None:
    v = budget_view(1.0, _rows([0.1, 0.1], [0.05]), in_flight=0, promotion_runs=4, promotion_runs_done=3)
    assert v.reserve == pytest.approx(0.05)  # one candidate run left
    assert v.spent == pytest.approx(0.25) and v.spent_by_stage["search"] == pytest.approx(0.05)
    free = budget_view(1.0, [], in_flight=0, promotion_runs=2)
    assert free.per_search_trial == 0 and free.search_slots() > 100  # no cost known: only the trial count binds


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _to_run(world: World, eng) -> object:
    c = run_until(eng, world.campaign(eng).id, lambda c: c.state == "run")  # references charged, no search yet
    assert eng.store.list_trials(c.id, stages=["search"]) == []
    return c


def test_no_room_beside_the_reserve_means_no_search(world: World) -> None:
    """Spent + promotion reserve already fill the budget: the old rule (spent < budget) launched a whole round of
    search trials here (4 free slots) whose promotion would then overrun; now the search stops at once and the
    campaign ends within its budget, delivering the reference."""
    eng = world.engine(world.executor(slots=4))
    c = _to_run(world, eng)
    v = eng.budget(c)
    assert v.per_reference_run > 0 and v.reserve == pytest.approx(2 * v.per_reference_run)  # 1 cand x 1 pair x 2
    budget = v.spent + v.reserve + 0.5 * v.per_search_trial
    assert v.spent < budget  # what the old rule looked at
    c = eng.store.update_campaign(c.id, budget_gpu_hours=budget)
    c = run_until(eng, c.id, lambda c: c.terminal)
    assert c.state == "done", c.error
    assert eng.store.list_trials(c.id, stages=["search"]) == []
    assert c.delivered_speedup in (None, 1.0)
    assert eng.budget(c).spent <= budget
    assert c.result["budget_at_search_stop"]["committed"] <= budget


def test_spend_stays_within_one_trial_of_the_budget(world: World) -> None:
    eng = world.engine(world.executor(slots=4))
    c = _to_run(world, eng)
    v = eng.budget(c)
    budget = v.spent + v.reserve + 2.5 * v.per_search_trial
    c = eng.store.update_campaign(c.id, budget_gpu_hours=budget)
    while not c.terminal:
        c = eng.tick(c.id)
        if c.state == "run":  # after every launch decision, what is committed fits (or nothing was launched)
            live = [t for t in eng.store.list_trials(c.id, stages=["search"]) if t.live]
            now = eng.budget(c, in_flight=len(live))
            assert now.committed <= budget + now.per_search_trial
    assert c.state == "done", c.error
    end = eng.budget(c)
    assert 1 <= len(eng.store.list_trials(c.id, stages=["search"])) <= 4
    assert end.spent <= budget + max(end.per_search_trial, end.per_reference_run)


def test_concurrency_peak_and_mean() -> None:
    from infrarsi.controller.campaign.budget import concurrency

    # two trials overlap for 5 of the 15 busy seconds; a trial without an end and a touching pair are handled
    c = concurrency([(0, 10), (5, 15), (None, 3), (15, 15)])
    assert c["peak"] == 2 and c["trials"] == 2 and c["mean"] == pytest.approx(20 / 15)
    assert concurrency([(0, 5), (5, 10)])["peak"] == 1  # back to back is not concurrent
    assert concurrency([]) == {"peak": 0, "mean": None, "trials": 0}


def test_report_says_how_the_budget_was_spent_and_the_concurrency(world: World) -> None:
    eng = world.engine(world.executor(slots=4))
    c = _to_run(world, eng)
    v = eng.budget(c)
    eng.store.update_campaign(c.id, budget_gpu_hours=v.spent + v.reserve + 2.5 * v.per_search_trial)
    c = run_until(eng, c.id, lambda c: c.terminal)
    report = (Path(c.workdir) / "report" / "REPORT.md").read_text()
    assert "reserved for the back-to-back promotion re-runs" in report
    assert "search trials ran at once" in report
