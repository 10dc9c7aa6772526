"""An in-memory :class:`~infrarsi.controller.store.base.Store` for fast tests (like Optuna's ``InMemoryStorage``).

Contract: the whole contract of :mod:`infrarsi.controller.store.base`, with these in-memory meanings:

- A :class:`MemoryDatabase` is "the database": rows in Python lists/dicts behind one re-entrant lock, a clock
  (``clock``, unix seconds; injectable) standing in for the database clock.  Several :class:`MemoryStore`
  instances over one database behave like several processes connected to one server (the lease tests and an
  engine "restart" use that).  Nothing survives the Python process.
- Every method runs under the database lock and either changes everything it must or nothing: all checks
  (fence, missing rows) happen before the first mutation.  Snapshots are the frozen records of
  :mod:`infrarsi.controller.store.records`; JSON-like fields are deep-copied on the way in and out, so changing a
  dict handed in or out never changes a stored row.
- The leader lease (:class:`MemoryLease`) follows :mod:`infrarsi.controller.store.lease`: tokens only grow,
  expiry is judged by the database clock, local validity by a monotonic clock, and a fenced store refuses every
  write (nothing written) with :class:`FencedError` once a newer token exists or its lease expired locally.
- Identity is the OS user (``pwd``, like SQLite); :meth:`MemoryStore.sees_all` is True.  The events list is
  append-only (there is no method that changes or removes an event).
- The finance views are computed in Python with the semantics of migration 0002 (the store suite checks both
  implementations against the same hand computation).
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

from infrarsi.controller.store.base import FencedError, LeaderLease, Store, clean_proposer_request
from infrarsi.controller.store.experience_memory import ExperienceMemoryMixin
from infrarsi.controller.store.lease import DEFAULT_LEASE_S, DEFAULT_NAME, new_holder_id
from infrarsi.controller.store.records import (
    AuditEvent, CampaignRecord, Ingest, LeaseRecord, ObservationRecord, ProposerRequestRecord, StoredReceipt,
    TrialRecord, VerdictItem, WorkloadRecord,
)
from infrarsi.controller.store.stage_records import stored_judge_spec

FINOPS_VIEWS = ("failed", "campaign_cost", "cost_per_pct", "llm_cost", "proposer_cost")
_CAMPAIGN_FIELDS = ("name", "workload_id", "owner", "contract_path", "contract_yaml", "contract_digest", "repo_path",
                    "workdir", "executor", "partition", "budget_gpu_hours", "budget_trials", "seed", "scope", "doctor",
                    "result", "delivered_speedup", "error", "sbatch")
_UPDATABLE = ("state",) + _CAMPAIGN_FIELDS


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


@dataclass
class _Cost:
    id: int
    campaign_id: int
    trial_id: int | None
    stage: str
    partition: str | None
    gpu_seconds: float
    failure_class: str | None
    llm_tokens: int
    cpu_seconds: float = 0.0


@dataclass
class _Lease:
    holder: str | None
    token: int
    expires_at: float


@dataclass
class MemoryDatabase:
    """The shared state of every :class:`MemoryStore` opened on it (one "server")."""

    clock: Callable[[], float] = time.time
    lock: threading.RLock = field(default_factory=threading.RLock)
    workloads: dict[int, WorkloadRecord] = field(default_factory=dict)
    campaigns: dict[int, CampaignRecord] = field(default_factory=dict)
    trials: dict[int, TrialRecord] = field(default_factory=dict)
    receipts: dict[int, bytes] = field(default_factory=dict)
    verdicts: dict[int, list[VerdictItem]] = field(default_factory=dict)
    observations: dict[int, ObservationRecord] = field(default_factory=dict)
    costs: list[_Cost] = field(default_factory=list)
    events: list[AuditEvent] = field(default_factory=list)
    experience: list[dict[str, Any]] = field(default_factory=list)
    proposer_requests: list[ProposerRequestRecord] = field(default_factory=list)
    exp: dict[str, Any] = field(default_factory=dict)  # experience protocol (store/experience_memory.py)
    leases: dict[str, _Lease] = field(default_factory=dict)
    _ids: dict[str, int] = field(default_factory=dict)

    def next_id(self, table: str) -> int:
        self._ids[table] = self._ids.get(table, 0) + 1
        return self._ids[table]


class MemoryLease(LeaderLease):
    """A named lease in a :class:`MemoryDatabase` (same contract as :class:`~infrarsi.controller.store.lease.SqlLease`)."""

    def __init__(self, db: MemoryDatabase, name: str = DEFAULT_NAME, holder: str | None = None,
                 lease_s: float = DEFAULT_LEASE_S, clock: Callable[[], float] = time.monotonic):
        self.db = db
        self.name = name
        self.holder = holder or new_holder_id()
        self.lease_s = lease_s
        self._clock = clock
        self._lock = threading.Lock()
        self._token: int | None = None
        self._valid_until = 0.0

    def acquire(self) -> bool:
        if self._token is not None and self.renew():
            return True
        started = self._clock()
        with self.db.lock:
            row = self.db.leases.setdefault(self.name, _Lease(holder=None, token=0, expires_at=0.0))
            now = self.db.clock()
            if row.holder is not None and row.expires_at >= now:
                self._token, self._valid_until = None, 0.0
                return False
            row.holder, row.token, row.expires_at = self.holder, row.token + 1, now + self.lease_s
            self._token, self._valid_until = row.token, started + self.lease_s
            return True

    def renew(self) -> bool:
        token = self._token
        if token is None:
            return False
        started = self._clock()
        with self.db.lock:
            row = self.db.leases.get(self.name)
            if row is None or row.holder != self.holder or row.token != token:
                self._token, self._valid_until = None, 0.0
                return False
            row.expires_at = self.db.clock() + self.lease_s
            self._valid_until = started + self.lease_s
            return True

    def release(self) -> None:
        token, self._token, self._valid_until = self._token, None, 0.0
        if token is None:
            return
        with self.db.lock:
            row = self.db.leases.get(self.name)
            if row is not None and row.holder == self.holder and row.token == token:
                row.holder, row.expires_at = None, 0.0

    def check(self) -> None:
        """FencedError unless this holder's token is current and the lease has not expired locally (call it with
        the database lock held to make a write conditional on it)."""
        token = self._token
        if token is None or not self.valid():
            raise FencedError(f"lease '{self.name}' expired or lost (token {token}): refusing to write")
        with self.db.lock:
            row = self.db.leases.get(self.name)
            current = row.token if row is not None else None
        if current != token:
            if self._token == token:
                self._token, self._valid_until = None, 0.0
            raise FencedError(f"lease '{self.name}' was taken over (token {current} > ours {token}): "
                              "refusing to write")


class MemoryStore(ExperienceMemoryMixin, Store):
    """The in-memory store over ``db`` (a fresh database when None); see the module docstring for the contract."""

    def __init__(self, db: MemoryDatabase | None = None, identity: str | None = None):
        self.db = db if db is not None else MemoryDatabase()
        self._fence: MemoryLease | None = None
        self._identity = identity

    def open(self) -> "MemoryStore":
        """Another store on the same database (a second process connected to the same server)."""
        return MemoryStore(self.db, self._identity)

    # ------------------------------------------------------------------ plumbing
    def _write(self) -> Iterator[None]:
        """Context for a write: holds the lock and checks the fence before anything changes."""
        import contextlib

        @contextlib.contextmanager
        def cm() -> Iterator[None]:
            with self.db.lock:
                if self._fence is not None:
                    self._fence.check()
                yield

        return cm()

    def _event(self, kind: str, payload: dict[str, Any] | None, campaign_id: int | None = None,
               trial_id: int | None = None) -> None:
        self.db.events.append(AuditEvent(id=self.db.next_id("events"), at=_now(), actor=self.identity(), kind=kind,
                                         campaign_id=campaign_id, trial_id=trial_id, payload=_copy(payload)))

    @staticmethod
    def _out(rec: Any) -> Any:
        """A snapshot whose JSON-like fields are private copies."""
        if isinstance(rec, CampaignRecord):
            return replace(rec, scope=_copy(rec.scope), doctor=_copy(rec.doctor), result=_copy(rec.result))
        if isinstance(rec, TrialRecord):
            return replace(rec, config=_copy(rec.config), patches=list(rec.patches))
        if isinstance(rec, ObservationRecord):
            return replace(rec, details=_copy(rec.details))
        return rec

    def _campaign(self, campaign_id: int) -> CampaignRecord:
        row = self.db.campaigns.get(campaign_id)
        if row is None:
            raise KeyError(f"no campaign {campaign_id}")
        return row

    def _trial(self, trial_id: int) -> TrialRecord:
        row = self.db.trials.get(trial_id)
        if row is None:
            raise KeyError(f"no trial {trial_id}")
        return row

    # ------------------------------------------------------------------ workloads
    def register_workload(self, name: str, owner: str, contract_yaml: str, contract_digest: str,
                          partition: str | None, max_concurrent: int) -> WorkloadRecord:
        with self._write():
            old = next((w for w in self.db.workloads.values() if w.name == name), None)
            rec = WorkloadRecord(id=old.id if old else self.db.next_id("workloads"), name=name, owner=owner,
                                 contract_yaml=contract_yaml, contract_digest=contract_digest, partition=partition,
                                 max_concurrent=max_concurrent, created_at=old.created_at if old else _now())
            self.db.workloads[rec.id] = rec
            self._event("workload.registered", {"name": name, "digest": contract_digest})
            return rec

    def list_workloads(self) -> list[WorkloadRecord]:
        with self.db.lock:
            return sorted(self.db.workloads.values(), key=lambda w: w.name)

    def get_workload(self, name_or_id: str | int) -> WorkloadRecord:
        with self.db.lock:
            if isinstance(name_or_id, int) or str(name_or_id).isdigit():
                row = self.db.workloads.get(int(name_or_id))
            else:
                row = next((w for w in self.db.workloads.values() if w.name == name_or_id), None)
            if row is None:
                raise KeyError(f"no workload '{name_or_id}'")
            return row

    # ------------------------------------------------------------------ campaigns
    def create_campaign(self, **fields: Any) -> CampaignRecord:
        unknown = set(fields) - set(_CAMPAIGN_FIELDS)
        if unknown:
            raise TypeError(f"create_campaign: unknown fields {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {k: None for k in ("workload_id", "partition", "scope", "doctor", "result",
                                                   "delivered_speedup", "error", "sbatch")}
        values.update({k: _copy(v) for k, v in fields.items()})
        if values.get("owner") is None:
            values["owner"] = self.identity()
        missing = [k for k in _CAMPAIGN_FIELDS if k not in values]
        if missing:
            raise TypeError(f"create_campaign: missing fields {', '.join(missing)}")
        with self._write():
            now = _now()
            rec = CampaignRecord(id=self.db.next_id("campaigns"), state="init", created_at=now, updated_at=now,
                                 **values)
            self.db.campaigns[rec.id] = rec
            self._event("campaign.created", {"name": rec.name}, campaign_id=rec.id)
            return self._out(rec)

    def get_campaign(self, campaign_id: int) -> CampaignRecord:
        with self.db.lock:
            return self._out(self._campaign(campaign_id))

    def list_campaigns(self, states: Sequence[str] | None = None) -> list[CampaignRecord]:
        with self.db.lock:
            rows = sorted(self.db.campaigns.values(), key=lambda c: -c.id)
            return [self._out(c) for c in rows if not states or c.state in states]

    def update_campaign(self, campaign_id: int, **fields: Any) -> CampaignRecord:
        bad = set(fields) - set(_UPDATABLE)
        if bad:
            raise TypeError(f"update_campaign: cannot set {', '.join(sorted(bad))}")
        with self._write():
            row = self._campaign(campaign_id)
            old = row.state
            if old == "cancelled" and fields.get("state", old) != old:
                fields = {k: v for k, v in fields.items() if k not in ("state", "error")}  # a cancel is final
            new = replace(row, updated_at=_now(), **{k: _copy(v) for k, v in fields.items()})
            self.db.campaigns[campaign_id] = new
            if "state" in fields and fields["state"] != old:
                self._event("campaign.state", {"from": old, "to": fields["state"], "error": fields.get("error")},
                            campaign_id=campaign_id)
            return self._out(new)

    # ------------------------------------------------------------------ trials
    def add_trial_intent(self, campaign_id: int, trial_key: str, stage: str, config: dict[str, Any],
                         patches: list[str], signature: str, executor: str, outdir: str, gpus: int,
                         partition: str | None, group_key: str | None = None,
                         asked_after: int | None = None) -> TrialRecord:
        with self._write():
            existing = next((t for t in self.db.trials.values() if t.trial_key == trial_key), None)
            if existing is not None:
                return self._out(existing)
            self._campaign(campaign_id)  # a foreign key
            seq = max((t.seq for t in self.db.trials.values() if t.campaign_id == campaign_id), default=0) + 1
            rec = TrialRecord(id=self.db.next_id("trials"), campaign_id=campaign_id, seq=seq, trial_key=trial_key,
                              stage=stage, config=_copy(config), patches=list(patches), signature=signature,
                              group_key=group_key, status="intent", outcome=None, reason=None, executor=executor,
                              job_id=None, submit_time=None, start_time=None, end_time=None, gpus=gpus,
                              partition=partition, attempt=1, outdir=outdir, asked_after=asked_after)
            self.db.trials[rec.id] = rec
            self._event("trial.intent", {"stage": stage, "config": config, "patches": list(patches),
                                         "key": trial_key}, campaign_id=campaign_id, trial_id=rec.id)
            return self._out(rec)

    def mark_submitted(self, trial_id: int, job_id: str, submit_time: float) -> TrialRecord:
        with self._write():
            row = self._trial(trial_id)
            if row.status == "intent":
                row = replace(row, status="submitted", job_id=job_id, submit_time=submit_time)
                self.db.trials[trial_id] = row
                self._event("trial.submitted", {"job_id": job_id, "submit_time": submit_time},
                            campaign_id=row.campaign_id, trial_id=trial_id)
            return self._out(row)

    def mark_resubmitted(self, trial_id: int, job_id: str, submit_time: float, reason: str) -> TrialRecord:
        with self._write():
            row = self._trial(trial_id)
            row = replace(row, status="submitted", job_id=job_id, submit_time=submit_time, attempt=row.attempt + 1)
            self.db.trials[trial_id] = row
            self._event("trial.requeued", {"job_id": job_id, "reason": reason, "attempt": row.attempt},
                        campaign_id=row.campaign_id, trial_id=trial_id)
            return self._out(row)

    def mark_finished(self, trial_id: int, outcome: str, reason: str, start_time: float | None,
                      end_time: float | None) -> TrialRecord:
        with self._write():
            row = self._trial(trial_id)
            if row.status in ("intent", "submitted"):
                row = replace(row, status="finished", outcome=outcome, reason=reason, start_time=start_time,
                              end_time=end_time)
                self.db.trials[trial_id] = row
                self._event("trial.finished", {"outcome": outcome, "reason": reason}, campaign_id=row.campaign_id,
                            trial_id=trial_id)
            return self._out(row)

    def ingest(self, trial_id: int, ingest: Ingest) -> bool:
        ing = ingest
        with self._write():
            row = self._trial(trial_id)
            if row.status == "ingested":
                return False
            row = replace(row, status="ingested", outcome=ing.outcome, reason=ing.reason,
                          start_time=ing.start_time if ing.start_time is not None else row.start_time,
                          end_time=ing.end_time if ing.end_time is not None else row.end_time)
            obs = ObservationRecord(id=self.db.next_id("observations"), trial_id=trial_id,
                                    step_time_s=ing.step_time_s, peak_mem_gib=ing.peak_mem_gib,
                                    censor_kind=ing.censor_kind, oom_shortfall_gib=ing.oom_shortfall_gib,
                                    loss_window_mean=ing.loss_window_mean, accepted=ing.accepted,
                                    first_failed_layer=ing.first_failed_layer, details=_copy(ing.details))
            cost = _Cost(id=self.db.next_id("costs"), campaign_id=row.campaign_id, trial_id=trial_id,
                         stage=row.stage, partition=row.partition, gpu_seconds=float(ing.gpu_seconds),
                         failure_class=None if ing.outcome == "ok" else ing.outcome, llm_tokens=0,
                         cpu_seconds=float(ing.cpu_seconds))
            # everything is built: now change the database (no step below can fail)
            self.db.trials[trial_id] = row
            if ing.receipt_raw is not None:
                self.db.receipts[trial_id] = bytes(ing.receipt_raw)
            self.db.verdicts[trial_id] = list(ing.verdicts)
            self.db.observations[trial_id] = obs
            self.db.costs.append(cost)
            self._event("trial.ingested", {"outcome": ing.outcome, "reason": ing.reason, "accepted": ing.accepted,
                                           "layer": ing.first_failed_layer, "gpu_seconds": ing.gpu_seconds,
                                           "cpu_seconds": ing.cpu_seconds},
                        campaign_id=row.campaign_id, trial_id=trial_id)
            return True

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self.db.lock:
            return self._out(self._trial(trial_id))

    def list_trials(self, campaign_id: int, statuses: Sequence[str] | None = None,
                    stages: Sequence[str] | None = None) -> list[TrialRecord]:
        with self.db.lock:
            rows = sorted((t for t in self.db.trials.values() if t.campaign_id == campaign_id), key=lambda t: t.seq)
            return [self._out(t) for t in rows
                    if (not statuses or t.status in statuses) and (not stages or t.stage in stages)]

    def live_trials(self, campaign_ids: Sequence[int] | None = None) -> list[TrialRecord]:
        with self.db.lock:
            return [self._out(t) for t in sorted(self.db.trials.values(), key=lambda t: t.id)
                    if t.live and (campaign_ids is None or t.campaign_id in campaign_ids)]

    def observations(self, campaign_id: int) -> dict[int, ObservationRecord]:
        with self.db.lock:
            return {tid: self._out(o) for tid, o in self.db.observations.items()
                    if self.db.trials[tid].campaign_id == campaign_id}

    def verdicts(self, trial_id: int) -> list[VerdictItem]:
        with self.db.lock:
            return list(self.db.verdicts.get(trial_id, []))

    def receipt_raw(self, trial_id: int) -> bytes | None:
        with self.db.lock:
            return self.db.receipts.get(trial_id)

    def list_receipts(self, campaign_id: int) -> list[StoredReceipt]:
        with self.db.lock:
            camp = self._campaign(campaign_id)
            rows = [(t, self.db.receipts[t.id]) for t in sorted(self.db.trials.values(), key=lambda t: t.seq)
                    if t.campaign_id == campaign_id and t.id in self.db.receipts]
            refs = [raw for t, raw in rows if t.stage == "reference" and t.outcome == "ok"]
            spec = stored_judge_spec(camp.scope, camp.doctor)
            return [StoredReceipt(trial_id=t.trial_key, stage=t.stage, raw=raw, reference_raw=list(refs),
                                  judge_spec=_copy(spec)) for t, raw in rows]

    # ------------------------------------------------------------------ events, costs, finance
    def add_event(self, kind: str, payload: dict[str, Any] | None = None, campaign_id: int | None = None,
                  trial_id: int | None = None) -> None:
        with self._write():
            self._event(kind, payload, campaign_id, trial_id)

    def events(self, campaign_id: int, limit: int = 100) -> list[dict[str, Any]]:
        with self.db.lock:
            rows = [e for e in self.db.events if e.campaign_id == campaign_id][-limit:] if limit > 0 else []
            return [{"id": e.id, "at": e.at, "kind": e.kind, "trial_id": e.trial_id, "payload": _copy(e.payload)}
                    for e in rows]

    def add_llm_cost(self, campaign_id: int, stage: str, llm_tokens: int) -> None:
        with self._write():
            self._campaign(campaign_id)
            self.db.costs.append(_Cost(id=self.db.next_id("costs"), campaign_id=campaign_id, trial_id=None,
                                       stage=stage, partition=None, gpu_seconds=0.0, failure_class=None,
                                       llm_tokens=int(llm_tokens)))

    def add_proposer_request(self, campaign_id: int, *, scope: dict[str, Any] | None = None,
                             **fields: Any) -> ProposerRequestRecord:
        f = clean_proposer_request(**{"n_priors": 0, "n_patches": 0, **fields})
        with self._write():
            camp = self._campaign(campaign_id)
            if scope is not None:
                self.db.campaigns[campaign_id] = replace(camp, updated_at=_now(), scope=_copy(scope))
            rec = ProposerRequestRecord(id=self.db.next_id("proposer_requests"), campaign_id=campaign_id,
                                        created_at=_now(), **f)
            self.db.proposer_requests.append(rec)
            if rec.tokens_in + rec.tokens_out > 0:
                self.db.costs.append(_Cost(id=self.db.next_id("costs"), campaign_id=campaign_id, trial_id=None,
                                           stage=rec.stage, partition=None, gpu_seconds=0.0, failure_class=None,
                                           llm_tokens=rec.tokens_in + rec.tokens_out))
            return rec

    def proposer_requests(self, campaign_id: int) -> list[ProposerRequestRecord]:
        with self.db.lock:
            return [r for r in self.db.proposer_requests if r.campaign_id == campaign_id]

    def cost_by_stage(self, campaign_id: int) -> list[dict[str, Any]]:
        with self.db.lock:
            groups: dict[tuple[str, str | None], list[_Cost]] = {}
            for c in self.db.costs:
                if c.campaign_id == campaign_id:
                    groups.setdefault((c.stage, c.failure_class), []).append(c)
            return [{"stage": st, "failure_class": fc, "entries": len(rows),
                     "gpu_hours": sum(r.gpu_seconds for r in rows) / 3600.0,
                     "llm_tokens": sum(r.llm_tokens for r in rows),
                     "cpu_hours": sum(r.cpu_seconds for r in rows) / 3600.0}
                    for (st, fc), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]

    def finops(self, view: str) -> list[dict[str, Any]]:
        if view not in FINOPS_VIEWS:
            raise KeyError(f"unknown finops view '{view}' (one of {', '.join(FINOPS_VIEWS)})")
        with self.db.lock:
            camps = sorted(self.db.campaigns.values(), key=lambda c: c.id)
            if view == "failed":
                return self._finops_failed(camps)
            if view in ("llm_cost", "proposer_cost"):
                return self._finops_llm(camps, per_proposer=view == "proposer_cost")
            cost = [self._campaign_cost(c) for c in camps]
            if view == "campaign_cost":
                return cost
            out = []
            for c, v in zip(camps, cost):
                s = c.delivered_speedup
                pct = (s - 1.0) * 100.0 if s is not None else None
                out.append({"campaign_id": c.id, "campaign": c.name, "owner": c.owner, "gpu_hours": v["gpu_hours"],
                            "delivered_speedup": s, "verified_pct": pct,
                            "gpu_hours_per_pct": v["gpu_hours"] / pct if s is not None and s > 1.0 else None})
            return out

    def _finops_failed(self, camps: list[CampaignRecord]) -> list[dict[str, Any]]:
        out = []
        for c in camps:
            groups: dict[tuple[str, str, str], list[_Cost]] = {}
            for r in self.db.costs:
                if r.campaign_id == c.id and r.failure_class is not None:
                    groups.setdefault((r.partition or c.partition or "", r.stage, r.failure_class), []).append(r)
            for (part, stage, fc), rows in sorted(groups.items()):
                out.append({"campaign_id": c.id, "campaign": c.name, "owner": c.owner, "partition": part,
                            "stage": stage, "failure_class": fc, "trials": len(rows),
                            "gpu_hours": sum(r.gpu_seconds for r in rows) / 3600.0,
                            "cpu_hours": sum(r.cpu_seconds for r in rows) / 3600.0})
        return out

    def _finops_llm(self, camps: list[CampaignRecord], per_proposer: bool) -> list[dict[str, Any]]:
        """``finops_llm_cost`` / ``finops_proposer_cost`` (migration 0006) computed from the lists."""
        out: list[dict[str, Any]] = []
        for c in camps:
            reqs = [r for r in self.db.proposer_requests if r.campaign_id == c.id]
            usd = lambda rows: (sum(r.usd for r in rows if r.usd is not None)  # noqa: E731
                                if any(r.usd is not None for r in rows) else None)
            if not per_proposer:
                out.append({"campaign_id": c.id, "campaign": c.name, "owner": c.owner, "state": c.state,
                            "gpu_hours": sum(r.gpu_seconds for r in self.db.costs if r.campaign_id == c.id) / 3600.0,
                            "llm_requests": len(reqs), "llm_failed_requests": sum(r.outcome != "ok" for r in reqs),
                            "llm_tokens_in": sum(r.tokens_in for r in reqs),
                            "llm_tokens_out": sum(r.tokens_out for r in reqs), "llm_usd": usd(reqs),
                            "proposer_wall_hours": sum(r.wall_s for r in reqs) / 3600.0})
                continue
            groups: dict[tuple[str, str, str], list[ProposerRequestRecord]] = {}
            for r in reqs:
                groups.setdefault((r.proposer, r.kind, r.model), []).append(r)
            for (prop, kind, model), rows in sorted(groups.items()):
                out.append({"campaign_id": c.id, "campaign": c.name, "owner": c.owner, "proposer": prop,
                            "kind": kind, "model": model, "requests": len(rows),
                            "failed_requests": sum(r.outcome != "ok" for r in rows),
                            "tokens_in": sum(r.tokens_in for r in rows), "tokens_out": sum(r.tokens_out for r in rows),
                            "usd": usd(rows), "wall_hours": sum(r.wall_s for r in rows) / 3600.0,
                            "patches": sum(r.n_patches for r in rows), "priors": sum(r.n_priors for r in rows)})
        return out

    def _campaign_cost(self, c: CampaignRecord) -> dict[str, Any]:
        rows = [r for r in self.db.costs if r.campaign_id == c.id]
        secs = lambda pred: sum(r.gpu_seconds for r in rows if pred(r)) / 3600.0  # noqa: E731
        return {"campaign_id": c.id, "campaign": c.name, "owner": c.owner, "state": c.state, "entries": len(rows),
                "gpu_hours": secs(lambda r: True),
                "failed_gpu_hours": secs(lambda r: r.failure_class is not None and r.failure_class != "rejected"),
                "rejected_gpu_hours": secs(lambda r: r.failure_class == "rejected"),
                "llm_tokens": sum(r.llm_tokens for r in rows), "budget_gpu_hours": c.budget_gpu_hours,
                "cpu_hours": sum(r.cpu_seconds for r in rows) / 3600.0}

    # ------------------------------------------------------------------ experience
    def add_experience(self, rows: Sequence[dict[str, Any]]) -> None:
        keys = ("knob", "value", "workload_class", "gpu", "log_speedup", "mem_delta_gib", "verified", "campaign_id")
        clean = []
        for r in rows:
            bad = set(r) - set(keys)
            if bad:
                raise TypeError(f"add_experience: unknown fields {', '.join(sorted(bad))}")
            clean.append({k: r.get(k, False if k == "verified" else None) for k in keys})
        with self._write():
            self.db.experience.extend(clean)

    def experience(self, workload_class: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        with self.db.lock:
            return [dict(e) for e in self.db.experience
                    if (not workload_class or e["workload_class"] == workload_class) and (not gpu or e["gpu"] == gpu)]

    # ------------------------------------------------------------------ coordination
    def lease(self, name: str = DEFAULT_NAME, holder: str | None = None, lease_s: float = 15.0) -> MemoryLease:
        return MemoryLease(self.db, name=name, holder=holder, lease_s=lease_s)

    def lease_info(self, name: str = DEFAULT_NAME) -> LeaseRecord | None:
        with self.db.lock:
            row = self.db.leases.get(name)
            if row is None:
                return None
            return LeaseRecord(name=name, holder=row.holder, token=row.token, expires_at=row.expires_at,
                               db_now=self.db.clock())

    def set_fence(self, lease: LeaderLease | None) -> None:
        if lease is not None and not (isinstance(lease, MemoryLease) and lease.db is self.db):
            raise TypeError("MemoryStore fences only with a MemoryLease of its own database")
        self._fence = lease

    # ------------------------------------------------------------------ identities and audit
    def identity(self) -> str:
        if self._identity is None:
            from infrarsi.controller.settings import os_user

            self._identity = os_user()
        return self._identity

    def sees_all(self) -> bool:
        return True

    def cancel_campaign(self, campaign_id: int, reason: str | None = None) -> CampaignRecord:
        with self.db.lock:
            c = self.get_campaign(campaign_id)
            if c.terminal:
                return c
            return self.update_campaign(campaign_id, state="cancelled",
                                        error=reason or f"cancelled by {self.identity()}")

    def audit(self, campaign_id: int | None = None, actor: str | None = None, since: Any = None,
              kinds: Sequence[str] | None = None, limit: int = 1000) -> list[AuditEvent]:
        with self.db.lock:
            rows = [e for e in self.db.events
                    if (campaign_id is None or e.campaign_id == campaign_id) and (actor is None or e.actor == actor)
                    and (since is None or e.at >= since) and (not kinds or e.kind in kinds)]
            return [replace(e, payload=_copy(e.payload)) for e in rows[-limit:]] if limit > 0 else []
