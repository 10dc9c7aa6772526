"""The campaign state machine: one code path for the embedded ``infrarsi run`` and the ``infrarsi serve`` daemon.

States: ``init -> doctor -> run -> verify -> report -> done`` (or ``failed`` / ``cancelled``).  Each
:meth:`CampaignEngine.tick` first reconciles the executor with the store (one batched poll for all live
trials of the campaign), ingests finished trials, then advances the state.

Crash safety: every side effect is preceded by a durable record.  A launch is stored as an ``intent`` before
the executor is called and as ``submitted`` with the job id after; a restart that finds an ``intent`` asks the
executor to adopt a job already launched under that trial key before launching it again, so no trial is lost
and none runs twice.  Ingestion is one transaction and idempotent.  The search state is never stored: it is
rebuilt by replaying ingested trials (see :mod:`infrarsi.controller.campaign.searchglue`).
"""

from __future__ import annotations

import logging
import statistics
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

from infrarsi.controller.campaign.budget import BudgetView, budget_view
from infrarsi.controller.campaign import proposing, searchglue
from infrarsi.controller.campaign.ingest import build_ingest
from infrarsi.controller.campaign.inputs import lock_scope_inputs
from infrarsi.controller.campaign.scope import lock_scope
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.campaign.sbatch_options import SbatchOptions
from infrarsi.controller.campaign.trialspec import build_spec, judge_spec_dict, trial_dirs
from infrarsi.controller.contract.launch import config_string
from infrarsi.controller.contract.loader import contract_digest
from infrarsi.controller.contract.model import Contract, Launch
from infrarsi.controller.errors import InfrarsiError, PatchError
from infrarsi.controller.faults import crash_point
from infrarsi.controller.executors.base import Executor, JobHandle, TrialSpec
from infrarsi.controller.search.space import Candidate
from infrarsi.controller.settings import Settings
from infrarsi.controller.store.base import Store
from infrarsi.controller.store.records import CampaignRecord, TrialRecord
from infrarsi.controller.store.stage_records import (Doctor, PlanCandidate, Scope, doctor_of, doctor_or_none,
                                                     result_of, scope_of, scope_or_none)
from infrarsi.surrogate.noise import calibrate
from infrarsi.verifier.receipt import Receipt, load_receipt
from infrarsi.verifier.spec import JudgeSpec

log = logging.getLogger("infrarsi.engine")
Progress = Callable[[str], None]


def parse_contract_yaml(text: str) -> Contract:
    """Validate a stored contract (already checked at submit time) into the model."""
    import io

    from ruamel.yaml import YAML

    from infrarsi.controller.contract.loader import _plain

    return Contract.model_validate(_plain(YAML(typ="rt").load(io.StringIO(text))))


class CampaignEngine:
    """Advances campaigns.  ``executors`` maps a backend name to an Executor (created on demand by ``factory``)."""

    def __init__(self, store: Store, settings: Settings, executor_factory: Callable[[str], Executor],
                 progress: Progress | None = None, partition_limits: dict[str, int] | None = None):
        self.store = store
        self.settings = settings
        self._factory = executor_factory
        self._executors: dict[str, Executor] = {}
        self.progress = progress or (lambda msg: None)
        self.partition_limits = dict(partition_limits or {})
        self._contracts: dict[int, Contract] = {}
        #: when True no new trial is launched (drain: live trials are still polled and ingested)
        self.paused = False
        self._refs: dict[int, list[Receipt]] = {}
        #: trials of campaigns cancelled elsewhere whose jobs this engine already asked the executor to stop
        self._stopped: set[int] = set()

    # ------------------------------------------------------------------ helpers
    def executor(self, name: str) -> Executor:
        if name not in self._executors:
            self._executors[name] = self._factory(name)
        return self._executors[name]

    def contract(self, c: CampaignRecord) -> Contract:
        if c.id not in self._contracts:
            self._contracts[c.id] = parse_contract_yaml(c.contract_yaml)
        return self._contracts[c.id]

    def judge_spec(self, c: CampaignRecord) -> JudgeSpec:
        scope, doctor = scope_or_none(c), doctor_or_none(c)
        d = dict(scope.judge_spec) if scope else {}
        if doctor:
            d["sigma_pair"] = doctor.sigma_pair
        return JudgeSpec.from_dict(d)

    def launch_of(self, c: CampaignRecord) -> Launch:
        """The campaign's effective launch section: the contract's, with ``infrarsi submit``'s sbatch options."""
        return SbatchOptions.from_dict(c.sbatch).launch(self.contract(c).launch)

    def _devices(self, c: CampaignRecord) -> int:
        """GPUs of one trial (at least 1: a CPU trial occupies one slot)."""
        launch = self.launch_of(c)
        return max(1, launch.nodes * max(1, launch.gpus_per_node))

    # ------------------------------------------------------------------ public
    def tick(self, campaign_id: int) -> CampaignRecord:
        """Reconcile, ingest and advance one campaign by at most one state; returns the updated snapshot.

        Problems with the campaign itself (a contract, scope or patch error) fail the campaign with that one-line
        message; store and executor outages propagate (the caller retries on its next tick)."""
        c = self.store.get_campaign(campaign_id)
        if c.terminal:
            live = self.store.live_trials([campaign_id])
            if live and c.state == "cancelled":  # cancelled through the store (infrarsi_cancel_campaign): stop jobs
                for t in live:
                    if t.status == "submitted" and t.job_id and t.id not in self._stopped:
                        self.executor(t.executor).cancel(self._handle(t))
                        self._stopped.add(t.id)
            if live:  # e.g. cancelled: keep polling until every job is accounted
                self._reconcile(c)
            return self.store.get_campaign(campaign_id)
        try:
            self._reconcile(c)
            c = self.store.get_campaign(campaign_id)
            step = getattr(self, f"_state_{c.state}")
            step(c)
        except InfrarsiError as exc:
            from infrarsi.controller.errors import ExecutorError, StoreError

            if isinstance(exc, (StoreError, ExecutorError)):
                raise
            self.progress(f"campaign {campaign_id} failed: {exc}")
            self.store.update_campaign(campaign_id, state="failed", error=str(exc))
        return self.store.get_campaign(campaign_id)

    def cancel(self, campaign_id: int, reason: str = "cancelled by user", wait_s: float = 60.0) -> CampaignRecord:
        """Cancel a campaign and every live job it has, then wait up to ``wait_s`` for the executor to confirm
        each job ended, so every trial is accounted (as cancelled, or as whatever it finished with).  Jobs still
        live after that are reconciled by later ticks of the daemon."""
        import time

        c = self.store.get_campaign(campaign_id)
        if c.terminal:
            return c
        self.store.update_campaign(campaign_id, state="cancelled", error=reason)
        for t in self.store.live_trials([campaign_id]):
            if t.status == "submitted" and t.job_id:
                self.executor(t.executor).cancel(self._handle(t))
        deadline = time.monotonic() + wait_s
        while True:
            self._reconcile(self.store.get_campaign(campaign_id))
            live = self.store.live_trials([campaign_id])
            if not live or time.monotonic() > deadline:
                break
            time.sleep(max(0.5, min(5.0, max(self.executor(t.executor).next_poll_in() for t in live))))
        return self.store.get_campaign(campaign_id)

    # ------------------------------------------------------------------ reconcile
    def _handle(self, t: TrialRecord) -> JobHandle:
        return JobHandle(trial_id=t.trial_key, backend=t.executor, job_id=t.job_id or "",
                         submit_time=t.submit_time or 0.0, outdir=str(Path(t.outdir)))

    def _reconcile(self, c: CampaignRecord) -> None:
        live = self.store.live_trials([c.id])
        by_backend: dict[str, list[TrialRecord]] = {}
        for t in live:
            if t.status == "intent":
                if c.terminal:
                    self.store.mark_finished(t.id, "cancelled", "campaign ended before launch", None, None)
                else:
                    self._launch(c, t)
                continue
            by_backend.setdefault(t.executor, []).append(t)
        for backend, trials in by_backend.items():
            statuses = self.executor(backend).poll([self._handle(t) for t in trials])
            for t in trials:
                st = statuses.get(t.trial_key)
                if st is None:
                    continue
                if st.state == "lost":
                    self.store.mark_finished(t.id, "crash", st.reason or "the job disappeared", st.start_time,
                                             st.end_time)
                elif st.finished:
                    self.store.mark_finished(t.id, st.outcome or "crash", st.reason, st.start_time, st.end_time)
        for t in self.store.list_trials(c.id, statuses=["finished"]):
            self._ingest(c, t)

    def _ingest(self, c: CampaignRecord, t: TrialRecord) -> None:
        contract = self.contract(c)
        spec = self.judge_spec(c)
        refs = self._reference_receipts(c) if t.stage != "reference" else []
        ing, _ = build_ingest(t, t.outcome or "crash", t.reason or "", t.start_time, t.end_time,
                              self.settings.master_key(), refs, spec, self._devices(c),
                              contract.search_capacity_gib, on_gpu=self.launch_of(c).gpus_per_node > 0)
        if self.store.ingest(t.id, ing):
            self.progress(self._describe(c, t, ing))
        remove_source(Path(c.repo_path), trial_dirs(Path(c.workdir), t.trial_key)[0])

    def _describe(self, c: CampaignRecord, t: TrialRecord, ing: Any) -> str:
        knobs = config_string(self.contract(c), t.config)
        patches = f" +{'+'.join(t.patches)}" if t.patches else ""
        doctor = doctor_or_none(c)
        t0 = doctor.t0 if doctor else None
        speed = f" {ing.step_time_s * 1000:.1f} ms/update" if ing.step_time_s else ""
        if ing.step_time_s and t0:
            speed += f" ({t0 / ing.step_time_s:.2f}x)"
        return f"[{c.id}] {t.stage} #{t.seq} {ing.outcome}{speed}: {knobs}{patches} — {ing.reason}"

    def _reference_receipts(self, c: CampaignRecord) -> list[Receipt]:
        if c.id in self._refs:
            return self._refs[c.id]
        refs = []
        for t in self.store.list_trials(c.id, statuses=["ingested"], stages=["reference"]):
            raw = self.store.receipt_raw(t.id)
            if t.outcome == "ok" and raw:
                refs.append(load_receipt(raw, self.settings.master_key(), t.trial_key))
        if c.doctor:  # references are complete once the doctor finished: cache them
            self._refs[c.id] = refs
        return refs

    # ------------------------------------------------------------------ launching
    def _new_trial(self, c: CampaignRecord, stage: str, cand: Candidate,
                   group_key: str | None = None) -> TrialRecord | None:
        if self.paused:
            return None
        key = uuid.uuid4().hex
        _, out = trial_dirs(Path(c.workdir), key)
        t = self.store.add_trial_intent(c.id, key, stage, cand.as_dict(), sorted(cand.patches), cand.signature,
                                        c.executor, str(out), self._devices(c), c.partition, group_key)
        crash_point("after_intent")
        self._launch(c, t)
        return t

    def _launch(self, c: CampaignRecord, t: TrialRecord) -> None:
        """Launch (or adopt) the job of a trial recorded as ``intent``."""
        contract = self.contract(c)
        scope = scope_of(c)
        src, _ = trial_dirs(Path(c.workdir), t.trial_key)
        out = Path(t.outdir)
        ex = self.executor(t.executor)
        adopt = getattr(ex, "adopt", None)
        handle = adopt(t.trial_key, out) if adopt is not None else None
        if handle is None:
            patches = [(name, scope.patches[name]) for name in t.patches]
            config = contract.reference_config | t.config
            from infrarsi.controller.contract.launch import render_launch

            plan = render_launch(contract, config)
            try:
                workdir = prepare_source(Path(c.repo_path), scope.commit, src, patches, plan.config_edits,
                                         scope.prefix, inputs=scope.inputs)
            except PatchError as exc:  # blamed on the patch set, not the campaign: recorded as a failed trial
                self.store.mark_finished(t.id, "crash", f"patch conflict: {exc}", None, None)
                return
            spec: TrialSpec = build_spec(contract, scope, config, t.trial_key, workdir, out,
                                         self.settings.master_key(), t.partition,
                                         sbatch=SbatchOptions.from_dict(c.sbatch))
            self.store.check_fence()  # a daemon whose lease was taken over must not launch (no-op when embedded)
            handle = ex.submit(spec)
            crash_point("after_submit")
        self.store.mark_submitted(t.id, handle.job_id, handle.submit_time)

    def _slots(self, c: CampaignRecord, want: int) -> int:
        """How many more trials this campaign may start now (executor slots, workload and partition limits)."""
        live_all = self.store.live_trials()
        live_mine = [t for t in live_all if t.campaign_id == c.id]
        limit = want
        if c.workload_id is not None:
            limit = min(limit, self.store.get_workload(c.workload_id).max_concurrent)
        if c.partition and c.partition in self.partition_limits:
            in_part = sum(1 for t in live_all if t.partition == c.partition)
            limit = min(limit, self.partition_limits[c.partition] - in_part + len(live_mine))
        free = self.executor(c.executor).free_slots()
        slots = limit - len(live_mine)
        if free is not None:
            slots = min(slots, free)
        return max(0, slots)

    def budget(self, c: CampaignRecord, in_flight: int = 0, promotion_runs_done: int | None = None) -> BudgetView:
        """The device-hour budget as it stands (:mod:`infrarsi.controller.campaign.budget`).
        ``promotion_runs_done`` is counted from the store when not given."""
        v = self.contract(c).verification
        runs = v.promotion_candidates * v.rerun_pairs * 2
        if promotion_runs_done is None:
            promotion_runs_done = len(self.store.list_trials(c.id, stages=["promotion"]))
        return budget_view(c.budget_gpu_hours, self.store.cost_by_stage(c.id), in_flight, runs, promotion_runs_done)

    # ------------------------------------------------------------------ states
    def _state_init(self, c: CampaignRecord) -> None:
        contract = self.contract(c)
        digest = contract_digest(contract)
        if digest != c.contract_digest:
            raise InfrarsiError(f"contract digest {digest[:12]} does not match the submitted {c.contract_digest[:12]}")
        scope = Scope(**lock_scope(Path(c.repo_path), contract, digest))
        scope = scope.replace(judge_spec=judge_spec_dict(contract, scope))
        scope = scope.replace(inputs=lock_scope_inputs(Path(c.repo_path), contract, scope, Path(c.workdir),
                                                       self.settings))
        Path(c.workdir).mkdir(parents=True, exist_ok=True)
        self.store.update_campaign(c.id, scope=scope.dump(), state="doctor")
        refused = scope.refused_patches
        self.progress(f"[{c.id}] init: locked {len(scope.frozen)} frozen and {len(scope.editable)} editable "
                      f"files at {scope.commit[:10]}; {len(scope.patches)} patches accepted, "
                      f"{len(refused)} refused")
        for name, why in refused.items():
            self.progress(f"[{c.id}] patch refused: {why}")

    def _state_doctor(self, c: CampaignRecord) -> None:
        contract = self.contract(c)
        refs = self.store.list_trials(c.id, stages=["reference"])
        need = contract.verification.reference_repeats
        if len(refs) < need:
            reference = Candidate.from_dict(searchglue.free_config(contract, contract.reference_config))
            for _ in range(min(need - len(refs), self._slots(c, need))):
                self._new_trial(c, "reference", reference)
            return
        if any(t.status != "ingested" for t in refs):
            return
        ok = [t for t in refs if t.outcome == "ok"]
        if len(ok) < 2:
            bad = next((t for t in refs if t.outcome != "ok"), refs[0])
            raise InfrarsiError(f"reference runs failed ({len(ok)}/{len(refs)} ok); first failure: "
                                f"{bad.outcome}: {bad.reason}")
        obs = self.store.observations(c.id)
        window_times = [obs[t.id].details["window_step_times"] for t in ok]
        noise = calibrate([np.asarray(w, dtype=float) for w in window_times])
        means = [obs[t.id].step_time_s for t in ok]
        phases: dict[str, float] = {}
        for t in ok:
            for k, v in (obs[t.id].details.get("phases") or {}).items():
                phases[k] = phases.get(k, 0.0) + v / len(ok)
        total = sum(phases.values())
        peaks = [obs[t.id].peak_mem_gib for t in ok if obs[t.id].peak_mem_gib is not None]
        doctor = {
            "t0": float(statistics.median(means)),
            "reference_window_means": means,
            "reference_window_times": window_times,
            "sigma_pair": float(noise.sigma_pair),
            "big_knob_gate": float(noise.big_knob_gate),
            "promotion_margin": float(noise.promotion_margin),
            "phases": phases,
            "phase_shares": {k: v / total for k, v in phases.items()} if total > 0 else {},
            "reference_peak_mem_gib": max(peaks) if peaks else None,
            "header_extra": obs[ok[0].id].details.get("header_extra") or {},
        }
        record = Doctor(**doctor)
        record = record.replace(**self._experience_snapshot(c, contract, record.header_extra))
        record = record.replace(**proposing.runner_of(self).doctor_priors(c, record))  # proposers' priors, frozen
        self.store.update_campaign(c.id, doctor=record.dump(), state="run")
        self.progress(f"[{c.id}] doctor: reference {record.t0 * 1000:.1f} ms/update, sigma_pair "
                      f"{noise.sigma_pair:.4f}, promotion margin {noise.promotion_margin * 100:.2f}%")

    def _experience_snapshot(self, c: CampaignRecord, contract: Contract,
                             header_extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Retrieved experience (controller/experience/doctor.py), frozen into the doctor record so that replaying
        the search stays deterministic even while other campaigns write experience back."""
        from infrarsi.controller.experience.doctor import doctor_experience

        return doctor_experience(self.store, contract, header_extra)

    def controller(self, c: CampaignRecord) -> Any:
        """The search controller rebuilt from the store (public for reports)."""
        contract = self.contract(c)
        doctor = doctor_of(c)
        return searchglue.rebuild_controller(contract, scope_of(c), doctor, c.seed,
                                             self.store.list_trials(c.id), self.store.observations(c.id),
                                             experience=doctor.experience)

    def _state_run(self, c: CampaignRecord) -> None:
        trials = self.store.list_trials(c.id, stages=["search"])
        live = [t for t in trials if t.live]
        # promotion reserved, in-flight trials at expected cost; no promotion run precedes the run state's end
        money = self.budget(c, in_flight=len(live), promotion_runs_done=0)
        out_of_budget = len(trials) >= c.budget_trials or money.search_slots() == 0
        if not out_of_budget:
            slots = min(self._slots(c, c.budget_trials), c.budget_trials - len(trials), money.search_slots())
            proposers = proposing.runner_of(self)  # patches asked of llm/agent proposers (campaign/proposing.py)
            if proposers.step(c, lambda: self.controller(c), live):
                c = self.store.get_campaign(c.id)  # answers recorded: their patches are in the scope now
            if slots > 0:
                ctrl = self.controller(c)
                pending = [searchglue.candidate_of(t) for t in live]
                cands = ctrl.ask(slots, pending=pending)
                for cand in cands:
                    self._new_trial(c, "search", cand)
                if cands:
                    return
                out_of_budget = not live and not proposers.busy(c.id)
        if not live and out_of_budget:  # `money` is current: nothing in flight, no trial cost booked since
            result = result_of(c).replace(budget_at_search_stop=money.to_dict())
            self.store.update_campaign(c.id, state="verify", result=result.dump())
            self.progress(f"[{c.id}] search done after {len(trials)} trials ({money.describe()}); "
                          f"verifying back to back")

    def _promotion_plan(self, c: CampaignRecord) -> list[PlanCandidate]:
        result = result_of(c)
        if result.plan is not None:
            return result.plan
        contract = self.contract(c)
        ctrl = self.controller(c)
        cands = ctrl.promotion_candidates(contract.verification.promotion_candidates)
        plan = [PlanCandidate(config=cand.as_dict(), patches=sorted(cand.patches), signature=cand.signature)
                for cand in cands]
        self.store.update_campaign(c.id, result=result.replace(plan=plan).dump())
        return plan

    def _state_verify(self, c: CampaignRecord) -> None:
        contract = self.contract(c)
        plan = self._promotion_plan(c)
        pairs = contract.verification.rerun_pairs
        order: list[tuple[str, Candidate, str]] = []
        reference = Candidate.from_dict(searchglue.free_config(contract, contract.reference_config))
        for p in plan:
            cand = Candidate.from_dict(p.config, p.patches)
            for i in range(pairs):
                group = f"{p.signature[:16]}:{i}"
                order += [("ref", reference, group), ("cand", cand, group)]
        done = self.store.list_trials(c.id, stages=["promotion"])
        if any(t.live or t.status == "finished" for t in done):
            return  # strictly back to back: one promotion run at a time
        if len(done) < len(order):
            _, cand, group = order[len(done)]
            self._new_trial(c, "promotion", cand, group_key=group)
            return
        self._finish_verify(c, plan, done)

    def _finish_verify(self, c: CampaignRecord, plan: list[PlanCandidate], done: list[TrialRecord]) -> None:
        from infrarsi.controller.campaign.promotion import decide

        obs = self.store.observations(c.id)
        ctrl = self.controller(c)
        promo, details = decide(ctrl, plan, done, obs)
        result = result_of(c).replace(promotion=details)
        self.store.update_campaign(c.id, result=result.dump(), delivered_speedup=promo.speedup, state="report")
        self.progress(f"[{c.id}] verify: delivered {promo.speedup:.3f}x — {promo.reason}")

    def _state_report(self, c: CampaignRecord) -> None:
        from infrarsi.controller.campaign.artifacts import write_artifacts

        paths = write_artifacts(self, c)
        self.store.update_campaign(c.id, state="done")
        self.progress(f"[{c.id}] done: {paths['report']}")

    # states with nothing to do
    def _state_done(self, c: CampaignRecord) -> None:  # pragma: no cover - terminal
        pass

    _state_failed = _state_cancelled = _state_done

