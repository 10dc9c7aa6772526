"""The campaign states as functions: ``decide(snapshot) -> actions``.

Contract:

* A state function reads only its :class:`Snapshot` (the campaign record with its typed stage records, the
  campaign's trials and observations, its cost by stage, its slot ``Capacity`` from the launcher, the contract)
  and returns a list of actions.  It never writes to the store, calls an executor or a
  proposer, and returns the same actions for the same snapshot.  The search controller it needs is rebuilt from
  the snapshot (:meth:`Snapshot.build_search`, a pure replay, fresh on every call like the engine's).
* What a decision reads beyond the store is read into the snapshot first by the engine: the proposers' step for
  ``run`` (answers recorded in the scope before the state reads it; :attr:`Snapshot.proposers_busy`), and for
  ``doctor`` where its prior requests stand (:attr:`Snapshot.proposer_priors`, once every reference is in).
* The decisions are the state's; the I/O they need is carried by an action.  Actions are applied by the engine,
  in order, through the store, the launcher and the proposers: :class:`Launch` (a trial, intent first; dropped
  while the launcher is paused), :class:`LockScope` (init: hash the repository, run the patch intake, lock the
  inputs manifest in the workdir with :func:`lock_scope_for`, then apply :func:`scope_locked`'s actions),
  :class:`Record` (a stage record, no state change), :class:`Advance` (the next state with its stage record),
  :class:`AskPriors` (doctor: ask the prior-giving proposers, in the background), :class:`CompleteDoctor` (the
  doctor record once the engine froze retrieved experience and, when the state says they are in, the booked
  proposers' priors into it), :class:`WriteReport` (result.json, pack.yaml, REPORT.md, experience write-back),
  :class:`Note` (a progress line) and :class:`Fail`.  An empty list means "wait" (trials are still running, or
  the proposers' answers are still coming).
* A problem with the campaign itself raises :class:`~infrarsi.controller.errors.InfrarsiError` or returns
  :class:`Fail`; the engine fails the campaign with the one-line message either way.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from infrarsi.controller.campaign import searchglue
from infrarsi.controller.campaign.budget import BudgetView, budget_view
from infrarsi.controller.campaign.launcher import Capacity
from infrarsi.controller.contract.loader import contract_digest
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.search.space import Candidate
from infrarsi.controller.store.records import CampaignRecord, ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import (Doctor, PlanCandidate, Result, Scope, doctor_of, result_of,
                                                     scope_of)
from infrarsi.surrogate.noise import calibrate


# ---------------------------------------------------------------------------------------------------- snapshot
@dataclass(frozen=True)
class Snapshot:
    """What one state decision sees.  Fields a state does not read may be left empty (the engine fills what the
    state needs: see :data:`NEEDS`)."""

    campaign: CampaignRecord
    contract: Contract
    trials: tuple[TrialRecord, ...] = ()
    observations: Mapping[int, ObservationRecord] = field(default_factory=lambda: MappingProxyType({}))
    cost_by_stage: tuple[Mapping[str, Any], ...] = ()
    capacity: Capacity | None = None
    #: doctor, once every reference is in: where the proposers' prior requests stand
    #: (:meth:`~infrarsi.controller.campaign.proposing.ProposerRunner.priors_status`): ``"none"`` (nothing to ask),
    #: ``"unasked"``, ``"pending"`` or ``"ready"``
    proposer_priors: str = "none"
    #: run: whether a proposer request is still in flight after the proposers' step
    proposers_busy: bool = False

    def stage(self, name: str) -> list[TrialRecord]:
        """The campaign's trials of one stage, in sequence order."""
        return [t for t in self.trials if t.stage == name]

    def slots(self, want: int) -> int:
        """How many more trials may start now (0 when no capacity was read)."""
        return self.capacity.slots(want) if self.capacity is not None else 0

    def build_search(self) -> Any:
        """The search controller replayed from the snapshot's trials (a new one on every call)."""
        c = self.campaign
        doctor = doctor_of(c)
        return searchglue.rebuild_controller(self.contract, scope_of(c), doctor, c.seed, list(self.trials),
                                             dict(self.observations), experience=doctor.experience)

    def with_campaign(self, c: CampaignRecord) -> "Snapshot":
        """The same snapshot over a re-read campaign record (e.g. after the proposers recorded patches)."""
        return replace(self, campaign=c)


#: which store reads each state needs in its snapshot: trials+observations, cost by stage, slot capacity
NEEDS: dict[str, frozenset[str]] = {
    "init": frozenset(), "doctor": frozenset({"trials", "capacity"}),
    "run": frozenset({"trials", "cost", "capacity"}), "verify": frozenset({"trials"}), "report": frozenset(),
}


# ---------------------------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Launch:
    """Start one trial of ``stage`` (``reference``, ``search`` or ``promotion``)."""

    stage: str
    candidate: Candidate
    group_key: str | None = None
    #: search trials told when the search proposed ``candidate`` (stored with the trial for the replay)
    asked_after: int | None = None


@dataclass(frozen=True)
class LockScope:
    """init: lock the scope from the repository (:func:`lock_scope_for`), then apply :func:`scope_locked`."""


@dataclass(frozen=True)
class AskPriors:
    """doctor: ask the prior-giving proposers for knob priors (in the background), shown ``record``."""

    record: Doctor


@dataclass(frozen=True)
class Record:
    """Store ``result`` (the run/verify stage record) without a state change."""

    result: Result


@dataclass(frozen=True)
class Advance:
    """Move to ``to_state``, storing the stage records given (and the delivered speedup), then say ``message``."""

    to_state: str
    scope: Scope | None = None
    doctor: Doctor | None = None
    result: Result | None = None
    delivered_speedup: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class CompleteDoctor:
    """Freeze retrieved experience (and, with ``collect_priors``, the proposers' answers, booked in the ledger now)
    into ``record``, store it and advance to run."""

    record: Doctor
    message: str
    collect_priors: bool = False


@dataclass(frozen=True)
class WriteReport:
    """Write the report artifacts and the experience write-back."""


@dataclass(frozen=True)
class Note:
    """A progress line."""

    message: str


@dataclass(frozen=True)
class Fail:
    """Fail the campaign with a one-line reason."""

    reason: str


Action = Union[Launch, LockScope, Record, Advance, AskPriors, CompleteDoctor, WriteReport, Note, Fail]


# ---------------------------------------------------------------------------------------------------- helpers
def budget_of(contract: Contract, c: CampaignRecord, cost_by_stage: Sequence[Mapping[str, Any]], in_flight: int,
              promotion_runs_done: int) -> BudgetView:
    """The device-hour budget (:mod:`infrarsi.controller.campaign.budget`) with promotion reserved up front."""
    v = contract.verification
    runs = v.promotion_candidates * v.rerun_pairs * 2
    return budget_view(c.budget_gpu_hours, [dict(r) for r in cost_by_stage], in_flight, runs, promotion_runs_done)


def reference_candidate(contract: Contract) -> Candidate:
    """The untouched reference as a search candidate."""
    return Candidate.from_dict(searchglue.free_config(contract, contract.reference_config))


def lock_scope_for(c: CampaignRecord, contract: Contract, settings: Any) -> Scope:
    """``init``'s I/O, carried by :class:`LockScope` once :func:`init` checked the contract's digest: lock the scope
    (frozen-file hashes, patch intake, judge spec, the inputs manifest written into the workdir) and create the
    workdir."""
    from infrarsi.controller.campaign.inputs import lock_scope_inputs
    from infrarsi.controller.campaign.scope import lock_scope
    from infrarsi.controller.campaign.trialspec import judge_spec_dict

    digest = contract_digest(contract)
    scope = Scope(**lock_scope(Path(c.repo_path), contract, digest))
    scope = scope.replace(judge_spec=judge_spec_dict(contract, scope))
    scope = scope.replace(inputs=lock_scope_inputs(Path(c.repo_path), contract, scope, Path(c.workdir), settings))
    Path(c.workdir).mkdir(parents=True, exist_ok=True)
    return scope


# ---------------------------------------------------------------------------------------------------- states
def init(s: Snapshot) -> list[Action]:
    """Refuse a changed contract (without reading the repository), else lock the scope."""
    c = s.campaign
    digest = contract_digest(s.contract)
    if digest != c.contract_digest:
        return [Fail(f"contract digest {digest[:12]} does not match the submitted {c.contract_digest[:12]}")]
    return [LockScope()]


def scope_locked(c: CampaignRecord, scope: Scope) -> list[Action]:
    """After :class:`LockScope`: advance to doctor with the locked ``scope``, one note per refused patch."""
    refused = scope.refused_patches
    msg = (f"[{c.id}] init: locked {len(scope.frozen)} frozen and {len(scope.editable)} editable "
           f"files at {scope.commit[:10]}; {len(scope.patches)} patches accepted, {len(refused)} refused")
    return [Advance("doctor", scope=scope, message=msg), *(Note(f"[{c.id}] patch refused: {why}")
                                                            for why in refused.values())]


def references_done(s: Snapshot) -> bool:
    """Whether every reference run of the doctor was launched and ingested: the engine reads where the proposers'
    prior requests stand (:attr:`Snapshot.proposer_priors`) only then."""
    refs = s.stage("reference")
    return len(refs) >= s.contract.verification.reference_repeats and all(t.status == "ingested" for t in refs)


def doctor(s: Snapshot) -> list[Action]:
    """Launch the missing reference runs; once all are ingested calibrate the noise and the reference, ask the
    prior-giving proposers (if any) and complete once their answers are in."""
    c, contract = s.campaign, s.contract
    refs = s.stage("reference")
    need = contract.verification.reference_repeats
    if len(refs) < need:
        return [Launch("reference", reference_candidate(contract))
                for _ in range(min(need - len(refs), s.slots(need)))]
    if not references_done(s):
        return []
    ok = [t for t in refs if t.outcome == "ok"]
    if len(ok) < 2:
        bad = next((t for t in refs if t.outcome != "ok"), refs[0])
        return [Fail(f"reference runs failed ({len(ok)}/{len(refs)} ok); first failure: {bad.outcome}: "
                     f"{bad.reason}")]
    obs = s.observations
    window_times = [obs[t.id].details["window_step_times"] for t in ok]
    noise = calibrate([np.asarray(w, dtype=float) for w in window_times])
    means = [obs[t.id].step_time_s for t in ok]
    phases: dict[str, float] = {}
    for t in ok:
        for k, v in (obs[t.id].details.get("phases") or {}).items():
            phases[k] = phases.get(k, 0.0) + v / len(ok)
    total = sum(phases.values())
    peaks = [obs[t.id].peak_mem_gib for t in ok if obs[t.id].peak_mem_gib is not None]
    record = Doctor(
        t0=float(statistics.median(means)), reference_window_means=means, reference_window_times=window_times,
        sigma_pair=float(noise.sigma_pair), big_knob_gate=float(noise.big_knob_gate),
        promotion_margin=float(noise.promotion_margin), phases=phases,
        phase_shares={k: v / total for k, v in phases.items()} if total > 0 else {},
        reference_peak_mem_gib=max(peaks) if peaks else None,
        header_extra=obs[ok[0].id].details.get("header_extra") or {},
    )
    msg = (f"[{c.id}] doctor: reference {record.t0 * 1000:.1f} ms/update, sigma_pair {noise.sigma_pair:.4f}, "
           f"promotion margin {noise.promotion_margin * 100:.2f}%")
    if s.proposer_priors == "unasked":
        return [AskPriors(record)]
    if s.proposer_priors == "pending":
        return []  # the answers come on a background thread; asked again next tick
    return [CompleteDoctor(record, msg, collect_priors=s.proposer_priors == "ready")]


def search_open(s: Snapshot) -> bool:
    """Whether the search may still start trials (trial count and device-hour budget): the engine runs the
    proposers' step before :func:`run` only then."""
    trials = s.stage("search")
    live = [t for t in trials if t.live]
    money = budget_of(s.contract, s.campaign, s.cost_by_stage, len(live), 0)
    return not (len(trials) >= s.campaign.budget_trials or money.search_slots() == 0)


def run(s: Snapshot) -> list[Action]:
    """Fill free slots with the search's proposals; when the budget is spent (or the search has nothing left to
    try and no proposer is busy) and nothing is in flight, advance to verify."""
    c = s.campaign
    trials = s.stage("search")
    live = [t for t in trials if t.live]
    # promotion reserved, in-flight trials at expected cost; no promotion run precedes the run state's end
    money = budget_of(s.contract, c, s.cost_by_stage, len(live), 0)
    out_of_budget = not search_open(s)
    if not out_of_budget:
        slots = min(s.slots(c.budget_trials), c.budget_trials - len(trials), money.search_slots())
        if slots > 0:
            pending = [searchglue.candidate_of(t) for t in live]
            ctrl = s.build_search()
            cands = ctrl.ask(slots, pending=pending)
            if cands:
                return [Launch("search", cand, asked_after=len(ctrl.history)) for cand in cands]
            out_of_budget = not live and not s.proposers_busy
    if not live and out_of_budget:  # `money` is current: nothing in flight, no trial cost booked since
        result = result_of(c).replace(budget_at_search_stop=money.to_dict())
        return [Advance("verify", result=result, message=f"[{c.id}] search done after {len(trials)} trials "
                                                         f"({money.describe()}); verifying back to back")]
    return []


def promotion_plan(s: Snapshot) -> tuple[list[PlanCandidate], bool]:
    """The candidates to re-run back to back: the stored plan, else the search's (``(plan, new)``)."""
    result = result_of(s.campaign)
    if result.plan is not None:
        return list(result.plan), False
    cands = s.build_search().promotion_candidates(s.contract.verification.promotion_candidates)
    return [PlanCandidate(config=cand.as_dict(), patches=sorted(cand.patches), signature=cand.signature)
            for cand in cands], True


def verify(s: Snapshot) -> list[Action]:
    """Re-run the plan strictly back to back (reference, candidate; one run at a time), then decide."""
    from infrarsi.controller.campaign.promotion import decide

    c, contract = s.campaign, s.contract
    plan, new = promotion_plan(s)
    actions: list[Action] = [Record(result_of(c).replace(plan=plan))] if new else []
    pairs = contract.verification.rerun_pairs
    order: list[tuple[str, Candidate, str]] = []
    reference = reference_candidate(contract)
    for p in plan:
        cand = Candidate.from_dict(p.config, p.patches)
        for i in range(pairs):
            group = f"{p.signature[:16]}:{i}"
            order += [("ref", reference, group), ("cand", cand, group)]
    done = s.stage("promotion")
    if any(t.live or t.status == "finished" for t in done):
        return actions  # strictly back to back: one promotion run at a time
    if len(done) < len(order):
        _, cand, group = order[len(done)]
        return [*actions, Launch("promotion", cand, group_key=group)]
    promo, details = decide(s.build_search(), plan, done, dict(s.observations))
    # the snapshot's result: a plan recorded in this same decision is not in it (as the engine always did)
    result = result_of(c).replace(promotion=details)
    return [*actions, Advance("report", result=result, delivered_speedup=promo.speedup,
                              message=f"[{c.id}] verify: delivered {promo.speedup:.3f}x — {promo.reason}")]


def report(s: Snapshot) -> list[Action]:
    """Write the artifacts, then done."""
    from infrarsi.controller.campaign.artifacts import report_dir

    c = s.campaign
    return [WriteReport(), Advance("done", message=f"[{c.id}] done: {report_dir(c) / 'REPORT.md'}")]


def terminal(s: Snapshot) -> list[Action]:
    """done, failed and cancelled: nothing to do."""
    return []


STATES: dict[str, Callable[[Snapshot], list[Action]]] = {
    "init": init, "doctor": doctor, "run": run, "verify": verify, "report": report,
    "done": terminal, "failed": terminal, "cancelled": terminal,
}


def decide(s: Snapshot) -> list[Action]:
    """The actions of the campaign's current state."""
    return STATES[s.campaign.state](s)
