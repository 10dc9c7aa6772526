"""The campaign engine in-process: memory store + in-process executor writing real signed receipts (seconds).

States init -> doctor -> run -> verify -> report -> done on the toy contract, failed and rejected trials, a
campaign whose references fail, cancel, slot accounting, pause, and adoption of an ``intent`` trial after a
"restart" (a new engine over the same memory database and the same in-process cluster).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.executors.inprocess import scripted_receipt
from tests.campaign.engine_world import Died, DiesAfterSubmit, DiesBeforeSubmit, BASE_STEP_S, World, make_world, run_until, speed_of, toy_job


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _states(engine, cid: int) -> list[str]:
    path = ["init"]
    for e in engine.store.events(cid, limit=1000):
        if e["kind"] == "campaign.state":
            assert e["payload"]["from"] == path[-1]
            path.append(e["payload"]["to"])
    return path


def test_toy_campaign_walks_every_state_and_every_trial_runs_once(world: World) -> None:
    ex = world.executor()
    eng = world.engine(ex)
    c = world.campaign(eng)
    c = run_until(eng, c.id, lambda c: c.terminal)
    assert c.state == "done", c.error
    assert _states(eng, c.id) == ["init", "doctor", "run", "verify", "report", "done"]
    trials = eng.store.list_trials(c.id)
    stages = [t.stage for t in trials]
    assert stages.count("reference") == 2 and stages.count("search") == 4 and stages.count("promotion") == 2
    assert all(t.status == "ingested" and t.outcome == "ok" for t in trials)
    assert sorted(world.cluster.ran) == sorted(t.trial_key for t in trials)  # each trial ran exactly once
    assert c.doctor["t0"] == pytest.approx(BASE_STEP_S, rel=0.02) and c.doctor["sigma_pair"] > 0
    assert c.delivered_speedup == pytest.approx(4.0, rel=0.05)  # speed=4 is the best knob value
    obs = eng.store.observations(c.id)
    assert all(obs[t.id].accepted for t in trials)
    verdicts = {v.invariant: v.status for v in eng.store.verdicts(trials[-1].id)}
    assert verdicts["executor_clock"] == "pass" and all(s != "fail" for s in verdicts.values())
    # a CPU campaign (gpus_per_node 0): booked as CPU-hours, one slot per trial, and no GPU-hours (issue 16)
    assert sum(r["gpu_hours"] for r in eng.store.cost_by_stage(c.id)) == 0.0
    spent = sum(r["cpu_hours"] for r in eng.store.cost_by_stage(c.id))
    assert spent == pytest.approx(sum(t.end_time - t.start_time for t in trials) / 3600)  # executor windows, 1 slot
    assert 0 < spent < 1.0 and eng.store.finops("campaign_cost")[0]["entries"] == len(trials)
    assert (Path(c.workdir) / "report" / "result.json").is_file()
    assert not any(Path(t.outdir, "trial.key").exists() for t in trials)  # the job consumed its key


def test_crashed_and_rejected_trials_are_recorded_and_the_campaign_continues(world: World) -> None:
    scripted = toy_job()
    loss_off = scripted_receipt(step_time_s=lambda r: BASE_STEP_S / speed_of(r), loss0=4.5)  # 50 % off the loss

    def job(run):
        if speed_of(run) == 4:
            raise RuntimeError("kernel launch failed: illegal instruction\nsecond line")
        if speed_of(run) == 2:
            return loss_off(run)
        return scripted(run)

    eng = world.engine(world.executor(job))
    c = run_until(eng, world.campaign(eng).id, lambda c: c.terminal)
    assert c.state == "done", c.error
    search = eng.store.list_trials(c.id, stages=["search"])
    crashed = [t for t in search if t.outcome == "crash"]
    rejected = [t for t in search if t.outcome == "rejected"]
    assert crashed and all(t.reason == "RuntimeError: kernel launch failed: illegal instruction "
                           f"(log: {t.outdir}/job.log)" for t in crashed), [t.reason for t in crashed]
    assert rejected and all(t.config["speed"] == 2 for t in rejected)
    obs = eng.store.observations(c.id)
    assert {obs[t.id].first_failed_layer for t in rejected} == {"L4"} and not any(obs[t.id].accepted for t in rejected)
    assert all("loss" in t.reason for t in rejected)
    failed = {(r["stage"], r["failure_class"]) for r in eng.store.finops("failed")}
    assert ("search", "crash") in failed and ("search", "rejected") in failed
    assert c.delivered_speedup is not None and c.delivered_speedup < 1.5  # nothing fast survived verification


def test_failing_references_fail_the_campaign_with_one_line(world: World) -> None:
    eng = world.engine(world.executor(scripted_receipt(exit_code=1, errors=["CUDA error: device-side assert"])))
    c = run_until(eng, world.campaign(eng).id, lambda c: c.terminal)
    assert c.state == "failed" and "\n" not in (c.error or "")
    assert c.error.startswith("reference runs failed (0/2 ok)") and "device-side assert" in c.error
    assert _states(eng, c.id) == ["init", "doctor", "failed"]


def test_cancel_stops_every_live_job_and_accounts_for_it(world: World) -> None:
    world.cluster.hold = True  # jobs stay running until released
    ex = world.executor(slots=4)
    eng = world.engine(ex)
    c = world.campaign(eng)
    c = run_until(eng, c.id, lambda c: len(eng.store.live_trials([c.id])) == 2)
    assert c.state == "doctor" and ex.free_slots() == 2
    assert all(t.status == "submitted" for t in eng.store.live_trials([c.id]))
    c = eng.cancel(c.id, reason="operator said stop", wait_s=5)
    assert c.state == "cancelled" and c.error == "operator said stop"
    trials = eng.store.list_trials(c.id)
    assert len(trials) == 2 and all(t.status == "ingested" and t.outcome == "cancelled" for t in trials)
    assert world.cluster.ran == [] and ex.free_slots() == 4  # nothing ran, every slot is free again
    assert eng.tick(c.id).state == "cancelled" and len(eng.store.list_trials(c.id)) == 2  # final


def test_slots_bound_the_launches(world: World) -> None:
    world.cluster.hold = True
    ex = world.executor(slots=1)
    eng = world.engine(ex)
    c = world.campaign(eng)
    c = run_until(eng, c.id, lambda c: c.state == "doctor")
    for _ in range(3):
        eng.tick(c.id)
    assert len(eng.store.list_trials(c.id)) == 1 and ex.free_slots() == 0  # the executor's one slot
    world.cluster.hold = False
    run_until(eng, c.id, lambda c: len(eng.store.list_trials(c.id)) == 2)
    wl = eng.store.register_workload("toy", "admin", "name: toy", "d" * 64, None, 1)
    world.cluster.hold = True
    eng2 = world.engine(world.executor(slots=None))  # unbounded executor: the workload's limit of 1 rules
    c2 = world.campaign(eng2, workload="toy")
    assert c2.workload_id == wl.id
    run_until(eng2, c2.id, lambda c: c.state == "doctor")
    for _ in range(3):
        eng2.tick(c2.id)
    assert len(eng2.store.list_trials(c2.id)) == 1


def test_paused_engine_launches_nothing_but_still_ingests(world: World) -> None:
    eng = world.engine()
    c = run_until(eng, world.campaign(eng).id, lambda c: c.state == "doctor")
    eng.paused = True
    for _ in range(3):
        c = eng.tick(c.id)
    assert c.state == "doctor" and eng.store.list_trials(c.id) == []
    eng.paused = False
    assert run_until(eng, c.id, lambda c: c.state == "run").doctor is not None


@pytest.mark.parametrize("dies, resubmits", [(DiesAfterSubmit, False), (DiesBeforeSubmit, True)])
def test_restart_adopts_an_intent_trial_or_submits_it_once(world: World, dies: type, resubmits: bool) -> None:
    eng1 = world.engine(dies(toy_job(), slots=1, cluster=world.cluster))
    c = run_until(eng1, world.campaign(eng1).id, lambda c: c.state == "doctor")
    with pytest.raises(Died):
        eng1.tick(c.id)
    (intent,) = eng1.store.live_trials([c.id])
    assert intent.status == "intent" and intent.job_id is None
    assert len(world.cluster.jobs) == (0 if resubmits else 1)
    ex2 = world.executor(slots=1)
    eng2 = world.engine(ex2)  # the restarted controller: same database, same cluster, new objects
    eng2.tick(c.id)
    t = eng2.store.get_trial(intent.id)
    assert t.trial_key == intent.trial_key and t.status in ("submitted", "ingested")
    assert len(ex2.submitted) == (1 if resubmits else 0)  # adopted: never submitted twice
    assert len(world.cluster.jobs) == 1 and t.job_id == next(iter(world.cluster.jobs))
    c = run_until(eng2, c.id, lambda c: c.terminal)
    assert c.state == "done", c.error
    keys = [t.trial_key for t in eng2.store.list_trials(c.id)]
    assert sorted(world.cluster.ran) == sorted(keys)  # every trial ran exactly once



def test_init_locks_the_scope_when_its_action_is_applied(world: World) -> None:
    eng = world.engine()
    c = world.campaign(eng)
    c = eng.tick(c.id)  # one tick: LockScope applied, then scope_locked's Advance
    assert c.state == "doctor" and c.scope["commit"] and c.scope["frozen"]
    assert any("init: locked 1 frozen and 1 editable files" in ln for ln in world.log)


def test_doctor_asks_for_priors_then_completes_once_they_are_booked(world: World) -> None:
    from infrarsi.controller.proposers.spec import ProposersSpec

    eng = world.engine()
    eng.proposer_site = ProposersSpec.model_validate([{"kind": "catalog"}])
    cid = world.campaign(eng).id
    c = run_until(eng, cid, lambda c: any("for knob priors" in ln for ln in world.log))
    assert c.state == "doctor" and eng.store.proposer_requests(cid) == []  # asked, nothing booked yet
    c = run_until(eng, cid, lambda c: c.state != "doctor", seconds=30)
    assert c.state == "run" and c.doctor["proposer_priors"] == []
    assert [(r.stage, r.request) for r in eng.store.proposer_requests(cid)] == [("doctor", "priors")]
    assert eng.proposers.priors_status(c) == "unasked"  # collected: nothing held in flight
