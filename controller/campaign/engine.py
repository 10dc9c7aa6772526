"""The campaign state machine: one code path for the embedded ``infrarsi run`` and the ``infrarsi serve`` daemon.

States: ``init -> doctor -> run -> verify -> report -> done`` (or ``failed`` / ``cancelled``).  A
:meth:`CampaignEngine.tick` is three steps:

1. **reconcile** through the :class:`~infrarsi.controller.campaign.launcher.TrialLauncher` (one batched poll for
   the campaign's live trials, interrupted intents adopted or launched, finished trials ingested);
2. **snapshot** (:meth:`CampaignEngine.snapshot`): the campaign record and what its state reads from the store
   (:data:`~infrarsi.controller.campaign.states.NEEDS`), plus what a decision reads first (run's proposer step,
   where doctor's prior requests stand);
3. **decide and apply**: the state function (:mod:`infrarsi.controller.campaign.states`) returns actions, which
   :meth:`CampaignEngine.apply` carries out in order through the store, the launcher and the proposers (init's
   scope lock, doctor's prior requests and experience retrieval are I/O carried by actions).

Crash safety lives in the launcher: a launch is stored as an ``intent`` before the executor is called and as
``submitted`` with the job id after; a restart that finds an ``intent`` asks the executor to adopt a job already
launched under that trial key before launching it again, so no trial is lost and none runs twice.  Ingestion is
one transaction and idempotent.  The search state is never stored: it is rebuilt by replaying ingested trials
(see :mod:`infrarsi.controller.campaign.searchglue`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

from infrarsi.controller.campaign import proposing, searchglue, states
from infrarsi.controller.campaign.budget import BudgetView
from infrarsi.controller.campaign.context import CampaignContracts, parse_contract_yaml
from infrarsi.controller.campaign.launcher import TrialLauncher
from infrarsi.controller.contract.model import Contract, Launch
from infrarsi.controller.errors import ExecutorError, InfrarsiError, StoreError
from infrarsi.controller.executors.base import Executor
from infrarsi.controller.settings import Settings
from infrarsi.controller.store.base import Store
from infrarsi.controller.store.records import CampaignRecord
from infrarsi.controller.store.stage_records import doctor_of, result_of, scope_of
from infrarsi.verifier.spec import JudgeSpec

log = logging.getLogger("infrarsi.engine")
Progress = Callable[[str], None]

__all__ = ["CampaignEngine", "parse_contract_yaml", "write_experience"]


class CampaignEngine:
    """Advances campaigns.  ``executor_factory`` builds an Executor per backend name on first use;
    ``partition_limits`` bounds live trials per partition over all campaigns."""

    def __init__(self, store: Store, settings: Settings, executor_factory: Callable[[str], Executor],
                 progress: Progress | None = None, partition_limits: dict[str, int] | None = None):
        self.store = store
        self.settings = settings
        self.progress = progress or (lambda msg: None)
        self.contracts = CampaignContracts()
        self.launcher = TrialLauncher(store, settings, executor_factory, self.contracts, self.progress,
                                      partition_limits)
        #: the proposers' site default for tests and embedded use (None: the daemon config's ``proposers:``);
        #: read when :attr:`proposers` is first used
        self.proposer_site: Any = None
        self._proposers: proposing.ProposerRunner | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def paused(self) -> bool:
        """When True no new trial is launched (drain: live trials are still polled and ingested)."""
        return self.launcher.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self.launcher.paused = value

    @property
    def partition_limits(self) -> dict[str, int]:
        return self.launcher.partition_limits

    def executor(self, name: str) -> Executor:
        """The executor for backend ``name``."""
        return self.launcher.executor(name)

    def contract(self, c: CampaignRecord) -> Contract:
        """The campaign's parsed contract (cached)."""
        return self.contracts.contract(c)

    def judge_spec(self, c: CampaignRecord) -> JudgeSpec:
        return self.contracts.judge_spec(c)

    def launch_of(self, c: CampaignRecord) -> Launch:
        """The campaign's effective launch section: the contract's, with ``infrarsi submit``'s sbatch options."""
        return self.contracts.launch_of(c)

    @property
    def proposers(self) -> proposing.ProposerRunner:
        """The proposers' runner (created on first use), which sees the engine only through
        :class:`~infrarsi.controller.campaign.proposing.ProposerDeps`: the store, the contract, progress."""
        if self._proposers is None:
            deps = proposing.ProposerDeps(store=self.store, contract_of=self.contract,
                                          progress=lambda msg: self.progress(msg))
            site = self.proposer_site
            self._proposers = proposing.ProposerRunner(deps, site, use_site=site is None)
        return self._proposers

    def search_for(self, c: CampaignRecord) -> Any:
        """The search controller rebuilt from the store (public for reports and the proposers)."""
        doctor = doctor_of(c)
        return searchglue.rebuild_controller(self.contract(c), scope_of(c), doctor, c.seed,
                                             self.store.list_trials(c.id), self.store.observations(c.id),
                                             experience=doctor.experience)

    def budget(self, c: CampaignRecord, in_flight: int = 0, promotion_runs_done: int | None = None) -> BudgetView:
        """The device-hour budget as it stands (:mod:`infrarsi.controller.campaign.budget`).
        ``promotion_runs_done`` is counted from the store when not given."""
        if promotion_runs_done is None:
            promotion_runs_done = len(self.store.list_trials(c.id, stages=["promotion"]))
        return states.budget_of(self.contract(c), c, self.store.cost_by_stage(c.id), in_flight,
                                promotion_runs_done)

    # ------------------------------------------------------------------ public
    def tick(self, campaign_id: int) -> CampaignRecord:
        """Reconcile, ingest and advance one campaign by at most one state; returns the updated snapshot.

        Problems with the campaign itself (a contract, scope or patch error) fail the campaign with that one-line
        message; store and executor outages propagate (the caller retries on its next tick)."""
        c = self.store.get_campaign(campaign_id)
        if c.terminal:
            self.launcher.settle_terminal(c)  # e.g. cancelled: keep polling until every job is accounted
            return self.store.get_campaign(campaign_id)
        try:
            self.launcher.reconcile(c)
            snap = self.snapshot(self.store.get_campaign(campaign_id))
            for action in states.decide(snap):
                self.apply(snap.campaign, action)
        except InfrarsiError as exc:
            if isinstance(exc, (StoreError, ExecutorError)):
                raise
            self._fail(campaign_id, str(exc))
        return self.store.get_campaign(campaign_id)

    def cancel(self, campaign_id: int, reason: str = "cancelled by user", wait_s: float = 60.0) -> CampaignRecord:
        """Cancel a campaign and every live job it has, then wait up to ``wait_s`` for the executor to confirm
        each job ended, so every trial is accounted (as cancelled, or as whatever it finished with).  Jobs still
        live after that are reconciled by later ticks of the daemon."""
        return self.launcher.cancel(campaign_id, reason, wait_s)

    # ------------------------------------------------------------------ snapshot
    def snapshot(self, c: CampaignRecord) -> states.Snapshot:
        """What the state of ``c`` decides on: the store reads it needs, then what must precede the decision
        (doctor, once every reference is in: where the proposers' prior requests stand; run: the proposers' step,
        which may record patches in the scope)."""
        contract = self.contract(c)
        need = states.NEEDS.get(c.state, frozenset())
        snap = states.Snapshot(
            campaign=c, contract=contract,
            trials=tuple(self.store.list_trials(c.id)) if "trials" in need else (),
            observations=MappingProxyType(self.store.observations(c.id)) if "trials" in need else MappingProxyType({}),
            cost_by_stage=tuple(self.store.cost_by_stage(c.id)) if "cost" in need else (),
            capacity=self.launcher.capacity(c) if "capacity" in need else None,
        )
        if c.state == "doctor" and states.references_done(snap):
            snap = replace(snap, proposer_priors=self.proposers.priors_status(c))
        elif c.state == "run" and states.search_open(snap):
            runner = self.proposers  # patches asked of llm/agent proposers (campaign/proposing.py)
            live = [t for t in snap.stage("search") if t.live]
            if runner.step(c, lambda: self.search_for(c), live):
                snap = snap.with_campaign(self.store.get_campaign(c.id))  # answers recorded in the scope now
            snap = replace(snap, proposers_busy=runner.busy(c.id))
        return snap

    # ------------------------------------------------------------------ actions
    def apply(self, c: CampaignRecord, action: states.Action) -> None:
        """Carry out one action of ``c``'s state function (see :mod:`infrarsi.controller.campaign.states`)."""
        if isinstance(action, states.Launch):
            self.launcher.new_trial(c, action.stage, action.candidate, group_key=action.group_key,
                                    asked_after=action.asked_after)
        elif isinstance(action, states.LockScope):
            scope = states.lock_scope_for(c, self.contract(c), self.settings)  # hashes the repository
            for then in states.scope_locked(c, scope):
                self.apply(c, then)
        elif isinstance(action, states.AskPriors):
            self.proposers.ask_priors(c, action.record)  # in the background: the state waits for the answers
        elif isinstance(action, states.Record):
            self.store.update_campaign(c.id, result=action.result.dump())
        elif isinstance(action, states.Advance):
            fields: dict[str, Any] = {"state": action.to_state}
            for name in ("scope", "doctor", "result"):
                record = getattr(action, name)
                if record is not None:
                    fields[name] = record.dump()
            if action.delivered_speedup is not None:
                fields["delivered_speedup"] = action.delivered_speedup
            self.store.update_campaign(c.id, **fields)
            if action.message:
                self.progress(action.message)
        elif isinstance(action, states.CompleteDoctor):
            record = action.record
            priors: dict[str, Any] | None = {}
            if action.collect_priors:  # every answer is in (the snapshot said so): booked in the ledger now
                priors = self.proposers.collect_priors(c, record)
                if priors is None:  # pragma: no cover - nothing to collect after all: the state decides again
                    return
            # retrieval once, when the record is stored (the proposers' prompt does not read it)
            record = record.replace(**self._experience_snapshot(c, self.contract(c), record.header_extra))
            record = record.replace(**priors)  # frozen priors
            self.store.update_campaign(c.id, doctor=record.dump(), state="run")
            self.progress(action.message)
        elif isinstance(action, states.WriteReport):
            self.write_report(c)
        elif isinstance(action, states.Note):
            self.progress(action.message)
        elif isinstance(action, states.Fail):
            self._fail(c.id, action.reason)
        else:  # pragma: no cover - a new action type without its applier
            raise TypeError(f"unknown action {action!r}")

    def _fail(self, campaign_id: int, reason: str) -> None:
        self.progress(f"campaign {campaign_id} failed: {reason}")
        self.store.update_campaign(campaign_id, state="failed", error=reason)

    def _experience_snapshot(self, c: CampaignRecord, contract: Contract,
                             header_extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Retrieved experience (controller/experience/doctor.py), frozen into the doctor record so that replaying
        the search stays deterministic even while other campaigns write experience back."""
        from infrarsi.controller.experience.doctor import doctor_experience

        return doctor_experience(self.store, contract, header_extra)

    # ------------------------------------------------------------------ report
    def report_inputs(self, c: CampaignRecord) -> Any:
        """What the artifacts are built from (:class:`~infrarsi.controller.campaign.artifacts.ReportInputs`):
        the campaign's records from the store, the proposers' section and the search's state."""
        from infrarsi.controller.campaign.artifacts import ReportInputs, SearchState

        trials = tuple(self.store.list_trials(c.id))
        result = result_of(c)
        cand = (result.promotion or {}).get("candidate")
        verdicts: list[Any] = []
        if cand:
            mine = [t for t in trials if t.stage == "promotion" and t.signature == cand["signature"]]
            verdicts = self.store.verdicts(mine[-1].id) if mine else []
        try:
            proposers = proposing.proposers_result(self.store, c)
        except Exception as exc:  # noqa: BLE001 - the rest of the report still matters
            proposers = {"error": f"{type(exc).__name__}: {exc}"}
        return ReportInputs(campaign=c, contract=self.contract(c), launch=self.launch_of(c), result=result,
                            trials=trials, observations=MappingProxyType(self.store.observations(c.id)),
                            cost_by_stage=tuple(self.store.cost_by_stage(c.id)), promoted_verdicts=tuple(verdicts),
                            search=SearchState.of(lambda: self.search_for(c)), proposers=proposers)

    def write_report(self, c: CampaignRecord) -> dict[str, Path]:
        """Write result.json, pack.yaml, progress.png and REPORT.md (:mod:`~infrarsi.controller.campaign.artifacts`),
        then write verified experience back (:func:`write_experience`); returns the artifacts' paths."""
        from infrarsi.controller.campaign.artifacts import build_result, finished_now, promoted_diff, write_artifacts

        inputs = self.report_inputs(c)
        # the I/O result.json needs beyond its inputs (a scratch export of the repository, the clock) happens here
        result = build_result(inputs, diff=promoted_diff(inputs), finished_at=finished_now())
        paths = write_artifacts(inputs, result)
        write_experience(self, c, result)
        return paths


def write_experience(engine: Any, c: CampaignRecord, result: Any) -> None:
    """Verified write-back into the experience bank, idempotent (controller/experience/writeback.py), of
    ``engine``'s campaign ``c``: the write-back gets the store, the contract, the search's conflicts and the
    signing key, never the engine.  A store that refuses it (a role
    without the bank grants) costs the bank these records, not the campaign its report: the refusal is reported
    as progress and ``infrarsi report --regenerate`` writes them later."""
    from infrarsi.controller.experience import writeback

    if result["reference"]["step_time_s"]:
        try:
            banned, needs = writeback.search_failures(lambda: engine.search_for(c))
            n = writeback.write_campaign_experience(
                engine.store, engine.contract(c), c, result, conflicts=banned, requirements=needs,
                master_key=engine.settings.master_key)
        except InfrarsiError as exc:
            engine.progress(f"[{c.id}] experience write-back refused: {exc}")
            return
        if n["effects"] or n["observations"]:
            engine.progress(f"[{c.id}] experience bank: {n['effects']} new effects, {n['observations']} "
                            f"observations")
