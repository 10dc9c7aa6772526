"""``controller/campaign/searchglue.py`` directly: the search space of the toy contract, outcomes of stored trials,
and a controller rebuilt from store snapshots that proposes exactly what the live one would."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from infrarsi.controller.campaign import searchglue
from infrarsi.controller.store.records import ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import doctor_of, scope_of
from tests.campaign.engine_world import make_world, run_until


def _trial(outcome: str | None, reason: str = "why", stage: str = "search", tid: int = 1) -> TrialRecord:
    return TrialRecord(id=tid, campaign_id=1, seq=tid, trial_key=f"k{tid}", stage=stage, config={"speed": 2, "chunk": 1},
                       patches=["b.diff", "a.diff"], signature="s", group_key=None, status="ingested", outcome=outcome,
                       reason=reason, executor="inprocess", job_id="1", submit_time=0.0, start_time=0.0, end_time=1.0,
                       gpus=1, partition=None, attempt=1, outdir="/o")


def _obs(**kw) -> ObservationRecord:
    base = dict(id=1, trial_id=1, step_time_s=0.04, peak_mem_gib=2.0, censor_kind="exact", oom_shortfall_gib=None,
                loss_window_mean=1.0, accepted=True, first_failed_layer=None, details={})
    return ObservationRecord(**{**base, **kw})


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory):
    world = make_world(tmp_path_factory.mktemp("glue"))
    eng = world.engine()
    c = run_until(eng, world.campaign(eng).id, lambda c: c.state == "verify")
    return eng, c


def test_space_excludes_derived_knobs_and_checks_couplings(ran) -> None:
    eng, c = ran
    contract = eng.contract(c)
    space = searchglue.search_space(contract, ["z.diff", "a.diff"])
    assert [k.name for k in space.knobs] == ["speed", "chunk"]  # accum is solved from chunk (a coupling)
    assert space.patches == ("a.diff", "z.diff") and all(k.ordered for k in space.knobs)
    assert searchglue.free_config(contract, {"speed": 1, "chunk": 2, "accum": 1}) == {"speed": 1, "chunk": 2}


def test_outcomes_of_stored_trials() -> None:
    cand = searchglue.candidate_of(_trial("ok"))
    assert cand.as_dict() == {"speed": 2, "chunk": 1} and sorted(cand.patches) == ["a.diff", "b.diff"]
    ok = searchglue.outcome_of(_trial("ok"), _obs(), 8.0)
    assert ok.status == "ok" and ok.step_time_s == 0.04 and ok.peak_mem_gib == 2.0
    oom = searchglue.outcome_of(_trial("oom"), _obs(step_time_s=None, oom_shortfall_gib=1.5), 8.0)
    assert oom.status == "oom" and oom.requested_gib == 9.5 and oom.capacity_gib == 8.0
    rej = searchglue.outcome_of(_trial("rejected", "L4 loss"), _obs(accepted=False, first_failed_layer="L4"), 8.0)
    assert rej.status == "rejected" and rej.rejected_layer == "L4" and rej.reason == "L4 loss"
    assert searchglue.outcome_of(_trial("ok"), None, 8.0).status == "crash"  # ok without an observation
    assert searchglue.outcome_of(_trial("timeout", ""), None, 8.0).reason == "timeout"


def test_rebuilt_controller_is_deterministic_and_ignores_cancelled(ran) -> None:
    eng, c = ran
    trials, obs = eng.store.list_trials(c.id), eng.store.observations(c.id)
    contract = eng.contract(c)

    def build(ts):
        return searchglue.rebuild_controller(contract, scope_of(c), doctor_of(c), c.seed, ts, obs,
                                             experience=c.doctor.get("experience"))

    a, b = build(trials), build(list(reversed(trials)))  # replay order comes from ingestion, not the list
    assert [x.signature for x in a.promotion_candidates(2)] == [x.signature for x in b.promotion_candidates(2)]
    assert [x.signature for x in a.ask(2)] == [x.signature for x in b.ask(2)]
    assert len(a.history) == len([t for t in trials if t.stage == "search"]) == 4
    best = a.promotion_candidates(1)[0]
    assert best.as_dict()["speed"] == 4
    cancelled = [replace(t, outcome="cancelled") if t.stage == "search" else t for t in trials]
    assert len(build(cancelled).history) == 0  # cancelled trials teach the search nothing
    noise = searchglue.noise_from_doctor(doctor_of(c))
    assert noise.sigma_pair == pytest.approx(c.doctor["sigma_pair"])


def test_search_trials_record_when_they_were_asked_and_the_replay_reads_it(ran) -> None:
    """Every search trial of a campaign run at two slots stores how many search trials had been told when it was
    proposed (reference and promotion trials store nothing); the first two went out together before any tell, and
    the rebuilt controller holds exactly these ask points (``stall_blind`` replays from them)."""
    eng, c = ran
    trials = eng.store.list_trials(c.id)
    search = sorted((t for t in trials if t.stage == "search"), key=lambda t: t.seq)
    assert all(t.asked_after is None for t in trials if t.stage != "search")
    asked = [t.asked_after for t in search]
    assert asked[:2] == [0, 0] and asked == sorted(asked) and all(a <= i for i, a in enumerate(asked))
    ctrl = searchglue.rebuild_controller(eng.contract(c), scope_of(c), doctor_of(c), c.seed, trials,
                                         eng.store.observations(c.id), experience=c.doctor.get("experience"))
    assert {searchglue.candidate_of(t): t.asked_after for t in search} == ctrl.asked_at
