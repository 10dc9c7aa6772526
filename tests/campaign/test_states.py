"""The campaign state functions (``controller/campaign/states.py``) driven from hand-built snapshots: no store, no
executor, no repository.  Each test builds the records a state would see and asserts the actions it returns."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

import pytest

from infrarsi.controller.campaign import states
from infrarsi.controller.campaign.context import parse_contract_yaml
from infrarsi.controller.campaign.launcher import Capacity
from infrarsi.controller.campaign.searchglue import free_config
from infrarsi.controller.contract.loader import contract_digest
from infrarsi.controller.search.space import Candidate
from infrarsi.controller.store.records import CampaignRecord, ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import Doctor, PlanCandidate, Result, Scope
from tests.campaign.helpers import TOY

TOY_YAML = (TOY / "infrarsi.yaml").read_text()
CONTRACT = parse_contract_yaml(TOY_YAML)
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
SCOPE = Scope(commit="c" * 40, contract_digest=contract_digest(CONTRACT), editable=["train.py"])
T0 = 0.08


def campaign(state: str, **kw: Any) -> CampaignRecord:
    base: dict[str, Any] = dict(
        id=7, name="toy", workload_id=None, owner="me", state=state, contract_path="/nowhere/infrarsi.yaml",
        contract_yaml=TOY_YAML, contract_digest=contract_digest(CONTRACT), repo_path="/nowhere",
        workdir="/nowhere/wd", executor="inprocess", partition=None, budget_gpu_hours=1.0, budget_trials=4, seed=0,
        scope=SCOPE.dump(), doctor=None, result=None, delivered_speedup=None, error=None, created_at=NOW,
        updated_at=NOW)
    base.update(kw)
    return CampaignRecord(**base)


def cand(**knobs: Any) -> Candidate:
    return Candidate.from_dict(free_config(CONTRACT, CONTRACT.reference_config | knobs))


REF = cand()
FAST = cand(speed=4)


def trial(tid: int, stage: str, c: Candidate = REF, status: str = "ingested", outcome: str | None = "ok",
          group: str | None = None, reason: str | None = None) -> TrialRecord:
    done = status in ("finished", "ingested")
    return TrialRecord(id=tid, campaign_id=7, seq=tid, trial_key=f"{tid:032x}", stage=stage, config=c.as_dict(),
                       patches=sorted(c.patches), signature=c.signature, group_key=group, status=status,
                       outcome=outcome if done else None, reason=reason, executor="inprocess", job_id=f"j{tid}",
                       submit_time=0.0, start_time=0.0 if done else None, end_time=1.0 if done else None, gpus=1,
                       partition=None, attempt=0, outdir=f"/nowhere/{tid}")


def obs(tid: int, step: float, windows: list[float] | None = None, **details: Any) -> ObservationRecord:
    peak = details.pop("peak", None)
    d = {"window_step_times": windows or [step * f for f in (1.0, 1.01, 0.99, 1.0, 1.005)], **details}
    return ObservationRecord(id=tid, trial_id=tid, step_time_s=step, peak_mem_gib=peak,
                             censor_kind=None, oom_shortfall_gib=None, loss_window_mean=3.0, accepted=True,
                             first_failed_layer=None, details=d)


def snap(c: CampaignRecord, trials: list[TrialRecord] = (), observations: list[ObservationRecord] = (),
         capacity: Capacity | None = Capacity(live=0), **kw: Any) -> states.Snapshot:
    return states.Snapshot(campaign=c, contract=CONTRACT, trials=tuple(trials), capacity=capacity,
                           observations=MappingProxyType({o.trial_id: o for o in observations}), **kw)


def doctored() -> Doctor:
    """A doctor record the way the doctor state makes it (two references ~80 ms)."""
    s = snap(campaign("doctor"), [trial(1, "reference"), trial(2, "reference")],
             [obs(1, T0), obs(2, T0 * 1.002, [T0 * f for f in (1.0, 0.99, 1.01, 1.0, 1.002)])])
    (done,) = states.decide(s)
    assert isinstance(done, states.CompleteDoctor)
    return done.record


# ------------------------------------------------------------------------------------------------ init
def test_init_locks_the_scope_when_the_contract_is_unchanged() -> None:
    assert states.decide(snap(campaign("init", scope=None))) == [states.LockScope()]


def test_init_advances_with_the_locked_scope_and_notes_refused_patches() -> None:
    lock = SCOPE.replace(refused_patches={"bad.diff": "bad.diff: binary patch"}, frozen={"infrarsi.yaml": "0" * 64})
    actions = states.scope_locked(campaign("init", scope=None), lock)
    assert actions[0] == states.Advance("doctor", scope=lock, message=actions[0].message)
    assert "locked 1 frozen and 1 editable files at cccccccccc; 0 patches accepted, 1 refused" in actions[0].message
    assert actions[1:] == [states.Note("[7] patch refused: bad.diff: binary patch")]


def test_init_fails_a_changed_contract_without_locking() -> None:
    c = campaign("init", scope=None, contract_digest="f" * 64)
    (fail,) = states.decide(snap(c))  # no LockScope: the repository is never read
    assert isinstance(fail, states.Fail) and fail.reason.endswith("does not match the submitted ffffffffffff")


# ------------------------------------------------------------------------------------------------ doctor
def test_doctor_launches_the_missing_references_within_its_slots() -> None:
    assert states.decide(snap(campaign("doctor"))) == [states.Launch("reference", REF)] * 2
    assert states.decide(snap(campaign("doctor"), capacity=Capacity(live=0, free=1))) == [
        states.Launch("reference", REF)]
    one_live = [trial(1, "reference", status="submitted")]
    assert states.decide(snap(campaign("doctor"), one_live, capacity=Capacity(live=1, limit=1))) == []
    assert states.decide(snap(campaign("doctor"), one_live, capacity=Capacity(live=1))) == [
        states.Launch("reference", REF)]


def test_doctor_waits_for_every_reference_to_be_ingested() -> None:
    s = snap(campaign("doctor"), [trial(1, "reference"), trial(2, "reference", status="finished")], [obs(1, T0)])
    assert states.decide(s) == []


def test_doctor_fails_when_references_fail() -> None:
    refs = [trial(1, "reference", outcome="crash", reason="CUDA error"), trial(2, "reference")]
    (fail,) = states.decide(snap(campaign("doctor"), refs, [obs(2, T0)]))
    assert fail == states.Fail("reference runs failed (1/2 ok); first failure: crash: CUDA error")


def test_doctor_calibrates_from_the_reference_observations() -> None:
    refs = [trial(1, "reference"), trial(2, "reference")]
    o = [obs(1, 0.08, phases={"forward": 0.03, "backward": 0.05}, header_extra={"flops_per_token": 7.0}, peak=2.0),
         obs(2, 0.082, [0.082, 0.081, 0.083, 0.082, 0.0815], phases={"forward": 0.01, "backward": 0.05}, peak=3.0)]
    (done,) = states.decide(snap(campaign("doctor"), refs, o, capacity=None))
    assert isinstance(done, states.CompleteDoctor)
    r = done.record
    assert r.t0 == pytest.approx(0.081) and r.reference_window_means == [0.08, 0.082]
    assert r.sigma_pair > 0 and r.promotion_margin > 0 and r.big_knob_gate > 0
    assert r.phases == pytest.approx({"forward": 0.02, "backward": 0.05})
    assert r.phase_shares["backward"] == pytest.approx(0.05 / 0.07)
    assert r.reference_peak_mem_gib == 3.0 and r.header_extra == {"flops_per_token": 7.0}
    assert r.experience is None or r.experience == []  # frozen by the engine when it applies the action
    assert done.message.startswith("[7] doctor: reference 81.0 ms/update, sigma_pair ")



def test_doctor_asks_the_proposers_for_priors_and_waits_for_their_answers() -> None:
    refs = [trial(1, "reference"), trial(2, "reference")]
    s = snap(campaign("doctor"), refs, [obs(1, T0), obs(2, T0 * 1.002)])
    assert states.references_done(s)
    assert not states.references_done(snap(campaign("doctor"), refs[:1], [obs(1, T0)]))
    (plain,) = states.decide(s)  # no prior-giving proposer: complete at once, nothing to collect
    assert isinstance(plain, states.CompleteDoctor) and not plain.collect_priors
    (ask,) = states.decide(replace(s, proposer_priors="unasked"))
    assert ask == states.AskPriors(plain.record)  # the prompt is built from the record the doctor made
    assert states.decide(replace(s, proposer_priors="pending")) == []  # answers still coming: wait
    (ready,) = states.decide(replace(s, proposer_priors="ready"))
    assert ready == states.CompleteDoctor(plain.record, plain.message, collect_priors=True)
    # a failed reference fails the campaign whatever the proposers do
    bad = snap(campaign("doctor"), [trial(1, "reference", outcome="crash", reason="x"), refs[1]], [obs(2, T0)])
    assert isinstance(states.decide(replace(bad, proposer_priors="pending"))[0], states.Fail)


# ------------------------------------------------------------------------------------------------ run
def _run(trials: list[TrialRecord] = (), observations: list[ObservationRecord] = (), **kw: Any) -> states.Snapshot:
    c = campaign("run", doctor=doctored().dump(), **kw.pop("campaign", {}))
    return snap(c, trials, observations, **kw)


def test_run_fills_free_slots_with_distinct_proposals() -> None:
    actions = states.decide(_run(capacity=Capacity(live=0, free=2)))
    assert [type(a) for a in actions] == [states.Launch, states.Launch]
    assert all(a.stage == "search" for a in actions) and actions[0].candidate != actions[1].candidate
    assert states.decide(_run(capacity=Capacity(live=0, free=0))) == []  # no slot: wait


def test_run_waits_for_live_trials_then_advances_when_the_trial_budget_is_spent() -> None:
    done = [trial(10 + i, "search", cand(speed=s, chunk=k)) for i, (s, k) in enumerate([(1, 2), (2, 1), (4, 1)])]
    o = [obs(10, 0.079), obs(11, 0.04), obs(12, 0.02)]
    live = trial(13, "search", cand(speed=4, chunk=2), status="submitted")
    assert not states.search_open(_run([*done, live], o))
    assert states.decide(_run([*done, live], o)) == []  # four trials, one still running
    last = replace(live, status="ingested", outcome="ok")
    (adv,) = states.decide(_run([*done, last], [*o, obs(13, 0.021)]))
    assert isinstance(adv, states.Advance) and adv.to_state == "verify"
    assert adv.result.budget_at_search_stop is not None and adv.result.plan is None
    assert adv.message.startswith("[7] search done after 4 trials (")


def test_run_stops_on_the_device_hour_budget_with_promotion_reserved() -> None:
    cost = ({"stage": "reference", "failure_class": None, "gpu_hours": 0.99, "cpu_hours": 0.0, "entries": 2},)
    s = _run(cost_by_stage=cost, campaign={"budget_gpu_hours": 1.0})
    assert not states.search_open(s)
    (adv,) = states.decide(s)
    assert adv.to_state == "verify" and adv.result.budget_at_search_stop["spent"] == pytest.approx(0.99)


class _Exhausted(states.Snapshot):
    """A snapshot whose search has nothing left to propose."""

    def build_search(self) -> Any:
        class _Ctrl:
            def ask(self, q: int, pending: Any = ()) -> list[Candidate]:
                return []
        return _Ctrl()


def test_run_with_nothing_to_propose_waits_for_a_busy_proposer() -> None:
    base = _run()
    s = _Exhausted(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    assert states.decide(replace(s, proposers_busy=True)) == []
    (adv,) = states.decide(replace(s, proposers_busy=False))
    assert adv.to_state == "verify" and adv.message.startswith("[7] search done after 0 trials")


# ------------------------------------------------------------------------------------------------ verify
def _verify(trials: list[TrialRecord], observations: list[ObservationRecord], plan: bool = True) -> states.Snapshot:
    search = [trial(10, "search", FAST)]
    result = Result(plan=[PlanCandidate(config=FAST.as_dict(), patches=[], signature=FAST.signature)]) if plan \
        else Result(budget_at_search_stop={"spent": 0.1})
    c = campaign("verify", doctor=doctored().dump(), result=result.dump())
    return snap(c, [*search, *trials], [obs(10, 0.02), *observations], capacity=None)


def test_verify_records_the_plan_then_runs_the_reference_first() -> None:
    record, launch = states.decide(_verify([], [], plan=False))
    assert isinstance(record, states.Record) and record.result.budget_at_search_stop == {"spent": 0.1}
    assert [p.signature for p in record.result.plan] == [FAST.signature]
    group = f"{FAST.signature[:16]}:0"
    assert launch == states.Launch("promotion", REF, group_key=group)


def test_verify_runs_strictly_back_to_back() -> None:
    group = f"{FAST.signature[:16]}:0"
    ref_live = trial(20, "promotion", REF, status="submitted", group=group)
    assert states.decide(_verify([ref_live], [])) == []
    ref_done = replace(ref_live, status="finished", outcome="ok")
    assert states.decide(_verify([ref_done], [])) == []  # finished, not yet ingested: still one at a time
    ref_in = replace(ref_live, status="ingested", outcome="ok")
    assert states.decide(_verify([ref_in], [obs(20, T0)])) == [states.Launch("promotion", FAST, group_key=group)]


def test_verify_decides_from_the_pairs_and_advances_to_report() -> None:
    group = f"{FAST.signature[:16]}:0"
    pair = [trial(20, "promotion", REF, group=group), trial(21, "promotion", FAST, group=group)]
    (adv,) = states.decide(_verify(pair, [obs(20, T0), obs(21, T0 / 4)]))
    assert isinstance(adv, states.Advance) and adv.to_state == "report"
    assert adv.delivered_speedup == pytest.approx(4.0, rel=0.01)
    assert adv.result.promotion["candidate"]["signature"] == FAST.signature
    assert adv.result.plan is not None and adv.message.startswith("[7] verify: delivered 4.0")


# ------------------------------------------------------------------------------------------------ report, terminal
def test_report_writes_then_finishes() -> None:
    assert states.decide(snap(campaign("report"))) == [
        states.WriteReport(), states.Advance("done", message="[7] done: /nowhere/wd/report/REPORT.md")]


@pytest.mark.parametrize("state", ["done", "failed", "cancelled"])
def test_terminal_states_do_nothing(state: str) -> None:
    assert states.decide(snap(campaign(state))) == []
