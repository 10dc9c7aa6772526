"""Launching and reconciling trials: the campaign's only contact with its executors.

:class:`TrialLauncher` owns every side effect outside the database that a campaign causes, and the store writes
that make them crash-safe:

* **reconcile** (:meth:`TrialLauncher.reconcile`): one batched ``poll`` per backend for the campaign's live
  trials; a finished or lost job is marked ``finished`` with the executor's outcome and clock; every ``finished``
  trial is then ingested (receipt, verdicts, observation, cost and outcome in one idempotent store transaction)
  and its source tree removed.  A live ``intent`` found here (a launch interrupted by a crash) is launched again,
  adopt first (below), or closed as cancelled when the campaign already ended.
* **launch** (:meth:`TrialLauncher.new_trial`, :meth:`TrialLauncher.launch`): the trial is stored as ``intent``
  (crash point ``after_intent``), then the executor is asked to ``adopt`` a job already launched under that trial
  key (one launched just before a crash is adopted, never launched twice); only when there is none is the source
  tree prepared, the fence checked (``store.check_fence()``: a daemon whose lease was taken over must not submit)
  and the job submitted (crash point ``after_submit``); finally the job id is stored (``submitted``).  A patch
  set that does not apply is recorded as a crashed trial, not as a campaign failure.
* **slot accounting** (:meth:`TrialLauncher.capacity`): executor free slots, the workload's ``max_concurrent``
  and the partition limits, against the live trials in the store.
* **cancel** (:meth:`TrialLauncher.cancel`, :meth:`TrialLauncher.settle_terminal`): stop every live job and keep
  reconciling until each is accounted.

While :attr:`TrialLauncher.paused` is set no new trial is started (drain); live ones are still polled and ingested.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from infrarsi.controller.campaign.context import CampaignContracts
from infrarsi.controller.campaign.ingest import build_ingest
from infrarsi.controller.campaign.sbatch_options import SbatchOptions
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.campaign.trialspec import build_spec, trial_dirs
from infrarsi.controller.contract.launch import config_string, render_launch
from infrarsi.controller.errors import PatchError
from infrarsi.controller.executors.base import Executor, JobHandle, TrialSpec
from infrarsi.controller.faults import crash_point
from infrarsi.controller.search.space import Candidate
from infrarsi.controller.settings import Settings
from infrarsi.controller.store.base import Store
from infrarsi.controller.store.records import CampaignRecord, TrialRecord
from infrarsi.controller.store.stage_records import doctor_or_none, scope_of
from infrarsi.verifier.receipt import Receipt, load_receipt

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Capacity:
    """How many trials a campaign may have live, as seen at one moment.

    ``live``: the campaign's live trials; ``limit``: the tightest of the workload's ``max_concurrent`` and the
    partition's limit (counted as this campaign's share: the limit minus other campaigns' live trials there),
    None when neither applies; ``free``: the executor's free slots (None: unknown or unbounded)."""

    live: int
    limit: int | None = None
    free: int | None = None

    def slots(self, want: int) -> int:
        """How many more trials may start now when the campaign wants ``want`` live at most."""
        limit = want if self.limit is None else min(want, self.limit)
        slots = limit - self.live
        if self.free is not None:
            slots = min(slots, self.free)
        return max(0, slots)


def handle_of(t: TrialRecord) -> JobHandle:
    """The executor handle of a submitted trial."""
    return JobHandle(trial_id=t.trial_key, backend=t.executor, job_id=t.job_id or "",
                     submit_time=t.submit_time or 0.0, outdir=str(Path(t.outdir)))


class TrialLauncher:
    """Launches, reconciles, ingests and cancels the trials of campaigns (see the module docstring).

    ``executor_factory`` builds an executor by backend name on first use; ``contracts`` is shared with the engine;
    ``partition_limits`` bounds live trials per partition over all campaigns."""

    def __init__(self, store: Store, settings: Settings, executor_factory: Callable[[str], Executor],
                 contracts: CampaignContracts, progress: Progress | None = None,
                 partition_limits: dict[str, int] | None = None):
        self.store = store
        self.settings = settings
        self.contracts = contracts
        self.progress = progress or (lambda msg: None)
        self.partition_limits = dict(partition_limits or {})
        self._factory = executor_factory
        #: backend name -> executor (the daemon's metrics read the executors from here)
        self.executors: dict[str, Executor] = {}
        #: when True no new trial is launched (drain: live trials are still polled and ingested)
        self.paused = False
        self._refs: dict[int, list[Receipt]] = {}
        #: trials of campaigns cancelled elsewhere whose jobs this launcher already asked the executor to stop
        self._stopped: set[int] = set()

    def executor(self, name: str) -> Executor:
        """The executor for backend ``name`` (created on first use)."""
        if name not in self.executors:
            self.executors[name] = self._factory(name)
        return self.executors[name]

    # ------------------------------------------------------------------ reconcile
    def reconcile(self, c: CampaignRecord) -> None:
        """Launch (adopt first) or close interrupted intents, poll live jobs in one call per backend, mark the
        finished ones and ingest every finished trial."""
        live = self.store.live_trials([c.id])
        by_backend: dict[str, list[TrialRecord]] = {}
        for t in live:
            if t.status == "intent":
                if c.terminal:
                    self.store.mark_finished(t.id, "cancelled", "campaign ended before launch", None, None)
                else:
                    self.launch(c, t)
                continue
            by_backend.setdefault(t.executor, []).append(t)
        for backend, trials in by_backend.items():
            statuses = self.executor(backend).poll([handle_of(t) for t in trials])
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
            self.ingest(c, t)

    def settle_terminal(self, c: CampaignRecord) -> None:
        """For a terminal campaign with live trials: stop the jobs of one cancelled through the store
        (``infrarsi_cancel_campaign``; each job asked once per launcher), then keep reconciling until every job
        is accounted."""
        live = self.store.live_trials([c.id])
        if live and c.state == "cancelled":
            for t in live:
                if t.status == "submitted" and t.job_id and t.id not in self._stopped:
                    self.executor(t.executor).cancel(handle_of(t))
                    self._stopped.add(t.id)
        if live:
            self.reconcile(c)

    def ingest(self, c: CampaignRecord, t: TrialRecord) -> None:
        """Verify and store a finished trial (idempotent), report it, remove its source tree."""
        contract = self.contracts.contract(c)
        spec = self.contracts.judge_spec(c)
        refs = self.reference_receipts(c) if t.stage != "reference" else []
        ing, _ = build_ingest(t, t.outcome or "crash", t.reason or "", t.start_time, t.end_time,
                              self.settings.master_key(), refs, spec, self.contracts.devices(c),
                              contract.search_capacity_gib, on_gpu=self.contracts.launch_of(c).gpus_per_node > 0)
        if self.store.ingest(t.id, ing):
            self.progress(self._describe(c, t, ing))
        remove_source(Path(c.repo_path), trial_dirs(Path(c.workdir), t.trial_key)[0])

    def _describe(self, c: CampaignRecord, t: TrialRecord, ing: Any) -> str:
        knobs = config_string(self.contracts.contract(c), t.config)
        patches = f" +{'+'.join(t.patches)}" if t.patches else ""
        doctor = doctor_or_none(c)
        t0 = doctor.t0 if doctor else None
        speed = f" {ing.step_time_s * 1000:.1f} ms/update" if ing.step_time_s else ""
        if ing.step_time_s and t0:
            speed += f" ({t0 / ing.step_time_s:.2f}x)"
        return f"[{c.id}] {t.stage} #{t.seq} {ing.outcome}{speed}: {knobs}{patches} — {ing.reason}"

    def reference_receipts(self, c: CampaignRecord) -> list[Receipt]:
        """The campaign's ok reference receipts (what the verifier compares a trial with); cached once the
        doctor finished, when they are complete."""
        if c.id in self._refs:
            return self._refs[c.id]
        refs = []
        for t in self.store.list_trials(c.id, statuses=["ingested"], stages=["reference"]):
            raw = self.store.receipt_raw(t.id)
            if t.outcome == "ok" and raw:
                refs.append(load_receipt(raw, self.settings.master_key(), t.trial_key))
        if c.doctor:
            self._refs[c.id] = refs
        return refs

    # ------------------------------------------------------------------ launching
    def new_trial(self, c: CampaignRecord, stage: str, cand: Candidate, group_key: str | None = None,
                  asked_after: int | None = None) -> TrialRecord | None:
        """Record a trial as ``intent`` and launch it; None (nothing recorded) while paused.  ``asked_after``: see
        :meth:`~infrarsi.controller.store.base.Store.add_trial_intent`."""
        if self.paused:
            return None
        key = uuid.uuid4().hex
        _, out = trial_dirs(Path(c.workdir), key)
        t = self.store.add_trial_intent(c.id, key, stage, cand.as_dict(), sorted(cand.patches), cand.signature,
                                        c.executor, str(out), self.contracts.devices(c), c.partition, group_key,
                                        asked_after=asked_after)
        crash_point("after_intent")
        self.launch(c, t)
        return t

    def launch(self, c: CampaignRecord, t: TrialRecord) -> None:
        """Launch (or adopt) the job of a trial recorded as ``intent``, then record it ``submitted``."""
        contract = self.contracts.contract(c)
        scope = scope_of(c)
        src, _ = trial_dirs(Path(c.workdir), t.trial_key)
        out = Path(t.outdir)
        ex = self.executor(t.executor)
        adopt = getattr(ex, "adopt", None)
        handle = adopt(t.trial_key, out) if adopt is not None else None
        if handle is None:
            patches = [(name, scope.patches[name]) for name in t.patches]
            config = contract.reference_config | t.config
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

    # ------------------------------------------------------------------ slots
    def capacity(self, c: CampaignRecord) -> Capacity:
        """The campaign's slot accounting now (executor slots, workload and partition limits)."""
        live_all = self.store.live_trials()
        mine = sum(1 for t in live_all if t.campaign_id == c.id)
        limits: list[int] = []
        if c.workload_id is not None:
            limits.append(self.store.get_workload(c.workload_id).max_concurrent)
        if c.partition and c.partition in self.partition_limits:
            in_part = sum(1 for t in live_all if t.partition == c.partition)
            limits.append(self.partition_limits[c.partition] - in_part + mine)
        return Capacity(live=mine, limit=min(limits) if limits else None,
                        free=self.executor(c.executor).free_slots())

    def slots(self, c: CampaignRecord, want: int) -> int:
        """How many more trials this campaign may start now."""
        return self.capacity(c).slots(want)

    # ------------------------------------------------------------------ cancel
    def cancel(self, campaign_id: int, reason: str = "cancelled by user", wait_s: float = 60.0) -> CampaignRecord:
        """Mark the campaign cancelled, stop every live job, then reconcile until each job is accounted (as
        cancelled, or as whatever it finished with) or ``wait_s`` passed; later ticks reconcile the rest."""
        c = self.store.get_campaign(campaign_id)
        if c.terminal:
            return c
        self.store.update_campaign(campaign_id, state="cancelled", error=reason)
        for t in self.store.live_trials([campaign_id]):
            if t.status == "submitted" and t.job_id:
                self.executor(t.executor).cancel(handle_of(t))
        deadline = time.monotonic() + wait_s
        while True:
            self.reconcile(self.store.get_campaign(campaign_id))
            live = self.store.live_trials([campaign_id])
            if not live or time.monotonic() > deadline:
                break
            time.sleep(max(0.5, min(5.0, max(self.executor(t.executor).next_poll_in() for t in live))))
        return self.store.get_campaign(campaign_id)
