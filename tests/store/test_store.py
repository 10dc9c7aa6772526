"""The Store contract on every backend (memory, SQLite, PostgreSQL; tests/store/conftest.py): round-trips,
ingestion atomicity, finops views, leader lease and fencing, snapshots that cannot change stored rows."""

from __future__ import annotations

import time

import pytest

from infrarsi.controller.store.base import FencedError
from infrarsi.controller.store.records import Ingest, VerdictItem
from infrarsi.controller.store.stage_records import Doctor, Scope, doctor_of, scope_of


def _campaign(store, name="c1", owner="alice", partition="gpu", speedup=None):
    return store.create_campaign(name=name, owner=owner, contract_path="/c/infrarsi.yaml", contract_yaml="name: x",
                                 contract_digest="d" * 64, repo_path="/r", workdir="/w", executor="slurm",
                                 partition=partition, budget_gpu_hours=10.0, budget_trials=20, seed=3)


def _trial(store, cid, key, stage="search", gpus=1):
    return store.add_trial_intent(cid, key, stage, {"mb": 4}, ["p.diff"], "sig-" + key, "slurm", f"/o/{key}", gpus,
                                  "gpu", group_key=None)


def _ingest(store, tid, outcome, gpu_seconds, layer=None):
    verdicts = (VerdictItem("completes", "L1", "pass", True, "ok"),
                VerdictItem("loss_within_tolerance", "L4", "fail" if layer == "L4" else "pass", True, "r"))
    return store.ingest(tid, Ingest(outcome=outcome, reason=f"{outcome} reason", receipt_raw=b'{"x": 1}',
                                    signature_ok=True, verdicts=verdicts, step_time_s=0.5 if outcome == "ok" else None,
                                    peak_mem_gib=3.0, censor_kind="oom" if outcome == "oom" else "exact",
                                    oom_shortfall_gib=1.5 if outcome == "oom" else None, accepted=outcome == "ok",
                                    first_failed_layer=layer, details={"k": [1, 2]}, gpu_seconds=gpu_seconds,
                                    start_time=100.0, end_time=100.0 + gpu_seconds))


def test_roundtrip_every_table(store) -> None:
    w = store.register_workload("gpt", "admin", "name: gpt", "a" * 64, "gpu", 4)
    assert store.get_workload("gpt") == w and store.get_workload(w.id) == w
    w2 = store.register_workload("gpt", "admin", "name: gpt2", "b" * 64, "gpu", 8)
    assert w2.id == w.id and w2.max_concurrent == 8 and len(store.list_workloads()) == 1
    c = _campaign(store)
    assert store.get_campaign(c.id).seed == 3 and c.state == "init"
    scope = Scope(commit="abc", judge_spec={"updates": 8})
    doctor = Doctor(t0=1.0, reference_window_times=[[1.0, 1.1]], sigma_pair=0.01, big_knob_gate=0.02,
                    promotion_margin=0.03)
    c = store.update_campaign(c.id, state="run", scope=scope.dump(), doctor=doctor.dump())
    assert c.scope == scope.dump() and scope_of(c) == scope and doctor_of(c) == doctor  # typed records round-trip
    t = _trial(store, c.id, "k1")
    assert t.status == "intent" and t.seq == 1 and t.config == {"mb": 4} and t.patches == ["p.diff"]
    assert _trial(store, c.id, "k1").id == t.id  # idempotent by trial key
    t = store.mark_submitted(t.id, "42", 1234.5)
    assert (t.status, t.job_id, t.submit_time) == ("submitted", "42", 1234.5)
    assert [x.id for x in store.live_trials([c.id])] == [t.id]
    t = store.mark_resubmitted(t.id, "43", 1240.0, "PREEMPTED")
    assert t.attempt == 2 and t.job_id == "43"
    store.mark_finished(t.id, "ok", "done", 1.0, 2.0)
    assert _ingest(store, t.id, "ok", 7200.0) is True
    assert _ingest(store, t.id, "ok", 7200.0) is False  # idempotent
    obs = store.observations(c.id)[t.id]
    assert obs.step_time_s == 0.5 and obs.details == {"k": [1, 2]} and obs.accepted
    assert [v.invariant for v in store.verdicts(t.id)] == ["completes", "loss_within_tolerance"]
    assert store.receipt_raw(t.id) == b'{"x": 1}'
    assert store.get_trial(t.id).status == "ingested" and not store.live_trials()
    store.add_llm_cost(c.id, "search", 1234)
    costs = store.cost_by_stage(c.id)
    assert sum(r["llm_tokens"] for r in costs) == 1234 and sum(r["gpu_hours"] for r in costs) == pytest.approx(2.0)
    store.add_experience([{"workload_class": "gpt", "gpu": "h200", "knob": "mb", "value": "8", "log_speedup": 0.3,
                           "mem_delta_gib": 1.0, "verified": True, "campaign_id": c.id}])
    assert store.experience(gpu="h200")[0]["log_speedup"] == 0.3
    kinds = [e["kind"] for e in store.events(c.id)]
    assert kinds[:3] == ["campaign.created", "campaign.state", "trial.intent"] and "trial.ingested" in kinds
    receipts = store.list_receipts(c.id)
    assert receipts[0].trial_id == "k1" and receipts[0].raw == b'{"x": 1}'
    assert receipts[0].judge_spec == {"updates": 8, "sigma_pair": 0.01}


def test_finops_views_match_hand_computation(store) -> None:
    a = _campaign(store, "a", "alice", "gpu")
    b = _campaign(store, "b", "bob", "debug")
    plan = [  # (campaign, stage, outcome, gpu_seconds, layer)
        (a, "reference", "ok", 3600, None), (a, "search", "ok", 1800, None), (a, "search", "oom", 900, None),
        (a, "search", "oom", 2700, None), (a, "search", "crash", 360, None), (a, "search", "rejected", 720, "L4"),
        (a, "promotion", "ok", 1440, None), (a, "promotion", "rejected", 180, "L5"),
        (b, "search", "crash", 7200, None), (b, "search", "timeout", 3600, None), (b, "search", "ok", 3600, None),
    ]
    for i, (c, stage, outcome, secs, layer) in enumerate(plan):
        t = _trial(store, c.id, f"t{i}", stage)
        store.mark_submitted(t.id, str(i), float(i))
        _ingest(store, t.id, outcome, float(secs), layer)
    store.update_campaign(a.id, delivered_speedup=1.25)
    store.update_campaign(b.id, delivered_speedup=1.0)
    failed = {(r["campaign"], r["owner"], r["partition"], r["stage"], r["failure_class"]): (r["trials"], r["gpu_hours"])
              for r in store.finops("failed")}
    assert failed == {
        ("a", "alice", "gpu", "search", "oom"): (2, pytest.approx(1.0)),
        ("a", "alice", "gpu", "search", "crash"): (1, pytest.approx(0.1)),
        ("a", "alice", "gpu", "search", "rejected"): (1, pytest.approx(0.2)),
        ("a", "alice", "gpu", "promotion", "rejected"): (1, pytest.approx(0.05)),
        ("b", "bob", "gpu", "search", "crash"): (1, pytest.approx(2.0)),
        ("b", "bob", "gpu", "search", "timeout"): (1, pytest.approx(1.0)),
    }
    cost = {r["campaign"]: r for r in store.finops("campaign_cost")}
    assert cost["a"]["gpu_hours"] == pytest.approx((3600 + 1800 + 900 + 2700 + 360 + 720 + 1440 + 180) / 3600)
    assert cost["a"]["failed_gpu_hours"] == pytest.approx((900 + 2700 + 360) / 3600)
    assert cost["a"]["rejected_gpu_hours"] == pytest.approx((720 + 180) / 3600)
    assert cost["b"]["gpu_hours"] == pytest.approx(4.0) and cost["b"]["entries"] == 3
    per = {r["campaign"]: r for r in store.finops("cost_per_pct")}
    assert per["a"]["verified_pct"] == pytest.approx(25.0)
    assert per["a"]["gpu_hours_per_pct"] == pytest.approx(cost["a"]["gpu_hours"] / 25.0)
    assert per["b"]["gpu_hours_per_pct"] is None  # 1.00x: no verified percent to divide by


def test_lease_is_exclusive_and_tokens_increase(store_factory) -> None:
    s1, s2 = store_factory(), store_factory()
    a, b = s1.lease(lease_s=30), s2.lease(lease_s=30)
    assert a.acquire() and a.token == 1 and a.valid()
    assert not b.acquire() and b.token is None
    assert a.acquire() and a.token == 1  # holding it already: a renewal, same token
    info = s2.lease_info()
    assert info is not None and info.holder == a.holder and info.token == 1 and info.held
    a.release()
    assert b.acquire() and b.token == 2  # a released lease is free at once; the token only grows
    assert not a.renew() and not a.valid()


def test_expired_lease_is_taken_over_and_old_writes_are_fenced(store_factory) -> None:
    s1, s2 = store_factory(), store_factory()
    cid = _campaign(s1).id
    old = s1.lease(lease_s=0.3)
    assert old.acquire()
    s1.set_fence(old)
    s1.add_event("written.by.old", campaign_id=cid)  # current token: accepted
    deadline = time.monotonic() + 10
    new = s2.lease(lease_s=30)
    while not new.acquire():  # the database clock decides when the old lease expired
        assert time.monotonic() < deadline, "the expired lease was never taken over"
        time.sleep(0.05)
    assert new.token == old.token + 1  # type: ignore[operator]
    n_events = len(s2.events(cid))
    for write in (lambda: s1.add_event("late", campaign_id=cid), lambda: s1.update_campaign(cid, state="failed"),
                  lambda: _trial(s1, cid, "late")):
        with pytest.raises(FencedError) as info:
            write()
        assert "\n" not in str(info.value) and "refusing to write" in str(info.value)
    with pytest.raises(FencedError):
        s1.check_fence()
    assert len(s2.events(cid)) == n_events and s2.get_campaign(cid).state == "init"
    assert s2.list_trials(cid) == []
    assert s1.get_campaign(cid).state == "init"  # reads are never fenced
    s2.set_fence(new)
    s2.add_event("written.by.new", campaign_id=cid)  # the new leader writes
    s1.set_fence(None)
    s1.add_event("unfenced", campaign_id=cid)  # a store without a fence (the CLI) is not checked


def test_lease_config_from_env_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from infrarsi.controller.errors import StoreError
    from infrarsi.controller.store.lease import LeaseConfig, grant_sql

    monkeypatch.setenv("INFRARSI_LEASE_S", "abc")
    with pytest.raises(StoreError, match="INFRARSI_LEASE_S='abc' is not a number"):
        LeaseConfig.from_env()
    monkeypatch.setenv("INFRARSI_LEASE_S", "4")
    monkeypatch.setenv("INFRARSI_LEASE_RENEW_S", "4")
    with pytest.raises(StoreError, match="must be below"):
        LeaseConfig.from_env()
    monkeypatch.setenv("INFRARSI_LEASE_RENEW_S", "1")
    assert LeaseConfig.from_env() == LeaseConfig(4.0, 1.0)
    assert grant_sql("infrarsi_daemon") == 'GRANT SELECT, INSERT, UPDATE ON TABLE public.leader_lease TO "infrarsi_daemon"'
    with pytest.raises(StoreError):
        grant_sql('x"; DROP TABLE trials; --')


def test_snapshots_are_frozen_copies(store) -> None:
    import dataclasses

    c = store.update_campaign(_campaign(store).id, scope={"commit": "abc", "frozen": {"a": "1"}})
    c.scope["frozen"]["a"] = "changed"  # a snapshot is a copy: changing it changes nothing stored
    assert store.get_campaign(c.id).scope == {"commit": "abc", "frozen": {"a": "1"}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.state = "done"  # type: ignore[misc]
    t = _trial(store, c.id, "k1")
    t.config["mb"] = 99
    assert store.get_trial(t.id).config == {"mb": 4}
    with pytest.raises(KeyError, match="no campaign 999"):
        store.get_campaign(999)
    with pytest.raises(KeyError, match="no trial 999"):
        store.get_trial(999)


def test_cancel_is_final_and_audited_with_identity(store) -> None:
    c = _campaign(store, owner=None)  # type: ignore[arg-type]
    me = store.identity()
    assert c.owner == me and store.sees_all()
    c = store.cancel_campaign(c.id, "stop it")
    assert c.state == "cancelled" and c.error == "stop it"
    assert store.update_campaign(c.id, state="run", error="late").state == "cancelled"  # a cancel is final
    assert store.cancel_campaign(c.id).error == "stop it"  # terminal: nothing changes
    trail = store.audit(campaign_id=c.id)
    assert [e.kind for e in trail] == ["campaign.created", "campaign.state"]
    assert {e.actor for e in trail} == {me} and trail[1].payload["to"] == "cancelled"
    assert store.audit(campaign_id=c.id, kinds=["campaign.state"], actor=me)[0].id == trail[1].id
    with pytest.raises(KeyError):
        store.cancel_campaign(999)


def test_fenced_ingest_writes_nothing(store_factory) -> None:
    s1, s2 = store_factory(), store_factory()
    cid = _campaign(s1).id
    t = _trial(s1, cid, "k1")
    old = s1.lease(lease_s=30)
    assert old.acquire()
    s1.set_fence(old)
    old_token = old.token
    s2.lease(lease_s=30).release()  # releasing a lease one does not hold changes nothing
    assert s2.lease_info().token == old_token  # type: ignore[union-attr]
    old.release()
    new = s2.lease(lease_s=30)
    assert new.acquire() and new.token == old_token + 1  # type: ignore[operator]
    with pytest.raises(FencedError):
        _ingest(s1, t.id, "ok", 10.0)
    assert s2.get_trial(t.id).status == "intent" and s2.observations(cid) == {} and s2.receipt_raw(t.id) is None
    assert s2.cost_by_stage(cid) == []
