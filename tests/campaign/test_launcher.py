"""``controller/campaign/launcher.py`` on its own: the memory store and the in-process executor (seconds).

Intent before submit and the crash points at their places, adopt-after-intent on a "restart" (a new launcher over
the same database and cluster), the fence checked before the submit, slot accounting, pause, reconcile (ingest,
lost jobs, interrupted intents), patch conflicts as failed trials, and stopping the jobs of a campaign cancelled
through the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infrarsi.controller.campaign import launcher as launcher_mod
from infrarsi.controller.campaign.context import CampaignContracts
from infrarsi.controller.campaign.launcher import Capacity, TrialLauncher
from infrarsi.controller.campaign.searchglue import free_config
from infrarsi.controller.executors.inprocess import InProcessExecutor
from infrarsi.controller.search.space import Candidate
from infrarsi.controller.store.base import FencedError
from infrarsi.controller.store.memory import MemoryStore
from infrarsi.controller.store.records import CampaignRecord
from tests.campaign.engine_world import Died, DiesAfterSubmit, DiesBeforeSubmit, World, make_world, run_until, toy_job


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _launcher(world: World, ex: InProcessExecutor, **kw: Any) -> TrialLauncher:
    """A launcher of a fresh "process": new store object over the same database, same cluster."""
    return TrialLauncher(MemoryStore(world.db), world.settings, lambda name: ex, CampaignContracts(),
                         progress=world.log.append, **kw)


def _locked(world: World, **kw: Any) -> CampaignRecord:
    """A campaign whose scope is locked (in ``doctor``, no trial yet)."""
    eng = world.engine(world.executor())
    eng.paused = True  # init only: no reference launched
    c = run_until(eng, world.campaign(eng, **kw).id, lambda c: c.state == "doctor")
    assert eng.store.list_trials(c.id) == []
    return c


def _cand(launcher: TrialLauncher, c: CampaignRecord, patches: tuple[str, ...] = (), **knobs: Any) -> Candidate:
    contract = launcher.contracts.contract(c)
    return Candidate.from_dict(free_config(contract, contract.reference_config | knobs), patches)


def test_intent_is_stored_before_the_submit_and_crash_points_sit_between(world: World,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    c = _locked(world)
    ex = world.executor()
    la = _launcher(world, ex)
    seen: list[tuple[str, str, int]] = []

    def point(name: str) -> None:
        (t,) = la.store.list_trials(c.id)
        seen.append((name, t.status, len(ex.submitted)))

    monkeypatch.setattr(launcher_mod, "crash_point", point)
    t = la.new_trial(c, "reference", _cand(la, c))
    # after_intent: recorded, executor not called; after_submit: launched, job id not yet recorded
    assert seen == [("after_intent", "intent", 0), ("after_submit", "intent", 1)]
    t = la.store.get_trial(t.id)
    assert t.status == "submitted" and t.job_id == next(iter(world.cluster.jobs)) and len(ex.submitted) == 1


@pytest.mark.parametrize("dies, resubmits", [(DiesAfterSubmit, False), (DiesBeforeSubmit, True)])
def test_a_restarted_launcher_adopts_the_intent_or_submits_it_once(world: World, dies: type,
                                                                   resubmits: bool) -> None:
    c = _locked(world)
    la1 = _launcher(world, dies(toy_job(), slots=2, cluster=world.cluster))
    with pytest.raises(Died):
        la1.new_trial(c, "reference", _cand(la1, c))
    (intent,) = la1.store.live_trials([c.id])
    assert intent.status == "intent" and intent.job_id is None
    ex2 = world.executor()
    la2 = _launcher(world, ex2)  # the restart: same database and cluster, new objects
    la2.reconcile(la2.store.get_campaign(c.id))
    t = la2.store.get_trial(intent.id)
    assert len(ex2.submitted) == (1 if resubmits else 0) and len(world.cluster.jobs) == 1
    assert t.status == "submitted" and t.job_id == next(iter(world.cluster.jobs))
    la2.reconcile(c)  # the job runs and is ingested
    assert la2.store.get_trial(intent.id).status == "ingested" and world.cluster.ran == [intent.trial_key]


def test_a_fenced_store_never_submits(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _locked(world)
    ex = world.executor()
    la = _launcher(world, ex)

    def fenced() -> None:
        raise FencedError("lease token 2 is no longer current")

    monkeypatch.setattr(la.store, "check_fence", fenced)
    with pytest.raises(FencedError):
        la.new_trial(c, "reference", _cand(la, c))
    (t,) = la.store.list_trials(c.id)
    assert t.status == "intent" and ex.submitted == [] and world.cluster.jobs == {}


def test_paused_launches_nothing(world: World) -> None:
    c = _locked(world)
    ex = world.executor()
    la = _launcher(world, ex)
    la.paused = True
    assert la.new_trial(c, "reference", _cand(la, c)) is None
    assert la.store.list_trials(c.id) == [] and ex.submitted == []


def test_reconcile_ingests_finished_jobs_and_closes_lost_ones(world: World) -> None:
    c = _locked(world)
    ex = world.executor()
    la = _launcher(world, ex)
    a = la.new_trial(c, "reference", _cand(la, c))
    b = la.new_trial(c, "reference", _cand(la, c))
    del world.cluster.jobs[la.store.get_trial(b.id).job_id]  # the scheduler forgot it
    la.reconcile(c)
    ta, tb = la.store.get_trial(a.id), la.store.get_trial(b.id)
    assert ta.status == "ingested" and ta.outcome == "ok" and la.store.observations(c.id)[a.id].accepted
    assert tb.status == "ingested" and tb.outcome == "crash"
    assert any(m.startswith(f"[{c.id}] reference #{ta.seq} ok ") for m in world.log)
    assert not (Path(c.workdir) / "trials" / a.trial_key[:16] / "src").exists()  # source tree removed


def test_an_intent_of_an_ended_campaign_is_closed_not_launched(world: World) -> None:
    c = _locked(world)
    la1 = _launcher(world, DiesBeforeSubmit(toy_job(), cluster=world.cluster))
    with pytest.raises(Died):
        la1.new_trial(c, "reference", _cand(la1, c))
    ex = world.executor()
    la = _launcher(world, ex)
    c = la.store.update_campaign(c.id, state="cancelled", error="stop")
    la.settle_terminal(c)
    (t,) = la.store.list_trials(c.id)
    assert t.status == "ingested" and t.outcome == "cancelled" and ex.submitted == []


def test_a_patch_that_does_not_apply_is_a_crashed_trial(world: World) -> None:
    c = _locked(world)
    bad = ("diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -1,2 +1,2 @@\n"
           "-this line is not in train.py\n+neither is this\n context that does not exist\n")
    scope = dict(c.scope)
    scope["patches"] = {"bad.diff": bad}
    ex = world.executor()
    la = _launcher(world, ex)
    c = la.store.update_campaign(c.id, scope=scope)
    t = la.new_trial(c, "search", _cand(la, c, ("bad.diff",)))
    t = la.store.get_trial(t.id)
    assert t.status == "finished" and t.outcome == "crash" and t.reason.startswith("patch conflict: ")
    assert ex.submitted == []


def test_capacity_counts_executor_workload_and_partition_limits(world: World) -> None:
    world.cluster.hold = True  # jobs stay running
    c = _locked(world)
    ex = world.executor(slots=3)
    la = _launcher(world, ex)
    assert la.capacity(c) == Capacity(live=0, limit=None, free=3)
    la.new_trial(c, "reference", _cand(la, c))
    assert la.capacity(c) == Capacity(live=1, limit=None, free=2) and la.slots(c, 2) == 1 and la.slots(c, 9) == 2
    la.store.register_workload("toy", "admin", "name: toy", "d" * 64, "gpu", 2)
    c2 = _locked(world, workload="toy")
    assert c2.partition == "gpu"
    la2 = _launcher(world, ex, partition_limits={"gpu": 1})
    assert la2.capacity(c2) == Capacity(live=0, limit=1, free=2)  # the partition (1) is tighter than the workload (2)
    la2.new_trial(c2, "reference", _cand(la2, c2))
    assert la2.slots(c2, 5) == 0
    la3 = _launcher(world, ex)
    assert la3.capacity(c2) == Capacity(live=1, limit=2, free=1) and la3.slots(c2, 5) == 1


def test_a_campaign_cancelled_through_the_store_has_each_job_stopped_once(world: World) -> None:
    world.cluster.hold = True
    c = _locked(world)
    ex = world.executor(slots=4)
    la = _launcher(world, ex)
    for _ in range(2):
        la.new_trial(c, "reference", _cand(la, c))
    c = la.store.update_campaign(c.id, state="cancelled", error="finance said stop")
    cancelled: list[str] = []
    real = ex.cancel
    ex.cancel = lambda h: (cancelled.append(h.job_id), real(h))[1]  # type: ignore[method-assign]
    la.settle_terminal(c)
    la.settle_terminal(c)
    assert len(cancelled) == 2 == len(set(cancelled))
    assert all(t.status == "ingested" and t.outcome == "cancelled" for t in la.store.list_trials(c.id))
    assert la.store.live_trials([c.id]) == [] and ex.free_slots() == 4


def test_cancel_marks_the_campaign_and_waits_for_every_job(world: World) -> None:
    world.cluster.hold = True
    c = _locked(world)
    ex = world.executor(slots=4)
    la = _launcher(world, ex)
    la.new_trial(c, "reference", _cand(la, c))
    after = la.cancel(c.id, reason="operator", wait_s=5)
    assert after.state == "cancelled" and after.error == "operator"
    (t,) = la.store.list_trials(c.id)
    assert t.outcome == "cancelled" and world.cluster.ran == []
