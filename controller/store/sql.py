"""The SQLAlchemy implementation of :class:`infrarsi.controller.store.base.Store` (PostgreSQL and SQLite)."""

from __future__ import annotations

import contextlib
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator, Sequence

from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from infrarsi.controller.errors import StoreError
from infrarsi.controller.faults import crash_point
from infrarsi.controller.store import models as m
from infrarsi.controller.store.base import LeaderLease, Store, clean_proposer_request
from infrarsi.controller.store.experience_sql import ExperienceSqlMixin
from infrarsi.controller.store.lease import LeaseConfig, SqlLease, read_lease
from infrarsi.controller.store.migrate import current_revision, head_revision, safe_url, upgrade
from infrarsi.controller.store.records import (
    AuditEvent, CampaignRecord, Ingest, LeaseRecord, ObservationRecord, ProposerRequestRecord, StoredReceipt,
    TrialRecord, VerdictItem, WorkloadRecord,
)
from infrarsi.controller.store.stage_records import stored_judge_spec

FINOPS_VIEWS = {
    "failed": "finops_failed_gpu_hours",
    "campaign_cost": "finops_campaign_cost",
    "cost_per_pct": "finops_cost_per_verified_pct",
    "llm_cost": "finops_llm_cost",
    "proposer_cost": "finops_proposer_cost",
}


class PermissionDeniedError(StoreError):
    """The database refused this role the statement (a missing grant or a row-level security policy)."""


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and enforced foreign keys."""
    if url.startswith("sqlite"):
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    # a session left idle inside a transaction (a SIGSTOPped daemon) would hold its row locks -- the lease row's
    # FOR SHARE included -- forever: PostgreSQL ends it once it outlives a lease
    idle_ms = int(LeaseConfig.from_env().lease_s * 1000)
    return create_engine(url, pool_pre_ping=True, connect_args={
        "connect_timeout": 10, "options": f"-c idle_in_transaction_session_timeout={idle_ms}"})


def _snap(cls: type, row: Any, **renames: str) -> Any:
    values = {}
    for f in fields(cls):
        src = renames.get(f.name, f.name)
        values[f.name] = getattr(row, src)
    return cls(**values)


def _campaign(row: m.Campaign) -> CampaignRecord:
    return _snap(CampaignRecord, row, scope="scope_json", doctor="doctor_json", result="result_json",
                 sbatch="sbatch_json")


def _trial(row: m.Trial) -> TrialRecord:
    return _snap(TrialRecord, row, config="config_json", patches="patches_json")


def _workload(row: m.Workload) -> WorkloadRecord:
    return _snap(WorkloadRecord, row)


class SqlStore(ExperienceSqlMixin, Store):
    """Store on any SQLAlchemy URL.  The schema must be at the Alembic head (see :func:`open_store`)."""

    def __init__(self, url: str, engine: Engine | None = None):
        self.url = url
        self.engine = engine or make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._fence: SqlLease | None = None

        @event.listens_for(self._sessions, "after_flush")
        def _wrote(session: Session, _ctx: Any) -> None:
            session.info["wrote"] = True

        self._identity: str | None = None

        @event.listens_for(self._sessions, "before_flush")
        def _actor(session: Session, _ctx: Any, _instances: Any) -> None:
            # PostgreSQL: the events_actor trigger writes session_user (unforgeable); SQLite: the OS user
            if self.dialect != "postgresql":
                for obj in session.new:
                    if isinstance(obj, m.Event) and obj.actor is None:
                        obj.actor = self.identity()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Session]:
        try:
            with self._sessions.begin() as session:
                yield session
                fence = self._fence
                if fence is not None:
                    session.flush()
                    if session.info.get("wrote"):
                        fence.fence(session.connection())  # FencedError rolls the whole transaction back
        except OperationalError as exc:
            raise StoreError(f"database {safe_url(self.url)} failed: {_one_line(exc)}") from None
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreError(f"lost the connection to {safe_url(self.url)}: {_one_line(exc)}") from None
            if getattr(getattr(exc, "orig", None), "sqlstate", None) == "42501":  # insufficient privilege, RLS
                raise PermissionDeniedError(f"{_one_line(exc)} (as role {self._identity or 'of ' + safe_url(self.url)};"
                                            f" roles and grants: docs/admin.md)") from None
            raise

    # workloads ---------------------------------------------------------------
    def register_workload(self, name: str, owner: str, contract_yaml: str, contract_digest: str,
                          partition: str | None, max_concurrent: int) -> WorkloadRecord:
        with self._tx() as s:
            row = s.scalar(select(m.Workload).where(m.Workload.name == name))
            if row is None:
                row = m.Workload(name=name)
                s.add(row)
            row.owner, row.contract_yaml, row.contract_digest = owner, contract_yaml, contract_digest
            row.partition, row.max_concurrent = partition, max_concurrent
            s.flush()
            s.add(m.Event(kind="workload.registered", payload={"name": name, "digest": contract_digest}))
            return _workload(row)

    def list_workloads(self) -> list[WorkloadRecord]:
        with self._tx() as s:
            return [_workload(r) for r in s.scalars(select(m.Workload).order_by(m.Workload.name))]

    def get_workload(self, name_or_id: str | int) -> WorkloadRecord:
        with self._tx() as s:
            if isinstance(name_or_id, int) or str(name_or_id).isdigit():
                row = s.get(m.Workload, int(name_or_id))
            else:
                row = s.scalar(select(m.Workload).where(m.Workload.name == name_or_id))
            if row is None:
                raise KeyError(f"no workload '{name_or_id}'")
            return _workload(row)

    # campaigns ---------------------------------------------------------------
    def create_campaign(self, **kw: Any) -> CampaignRecord:
        mapping = {"scope": "scope_json", "doctor": "doctor_json", "result": "result_json", "sbatch": "sbatch_json"}
        if kw.get("owner") is None:
            kw["owner"] = self.identity()  # on PostgreSQL the campaigns_owner trigger has the last word
        with self._tx() as s:
            row = m.Campaign(state="init", **{mapping.get(k, k): v for k, v in kw.items()})
            s.add(row)
            s.flush()
            if self.dialect == "postgresql":
                s.refresh(row, ["owner"])  # the campaigns_owner trigger may have replaced it with current_user
            s.add(m.Event(campaign_id=row.id, kind="campaign.created", payload={"name": row.name}))
            return _campaign(row)

    def get_campaign(self, campaign_id: int) -> CampaignRecord:
        with self._tx() as s:
            row = s.get(m.Campaign, campaign_id)
            if row is None:
                raise KeyError(f"no campaign {campaign_id}")
            return _campaign(row)

    def list_campaigns(self, states: Sequence[str] | None = None) -> list[CampaignRecord]:
        with self._tx() as s:
            q = select(m.Campaign).order_by(m.Campaign.id.desc())
            if states:
                q = q.where(m.Campaign.state.in_(list(states)))
            return [_campaign(r) for r in s.scalars(q)]

    def update_campaign(self, campaign_id: int, **kw: Any) -> CampaignRecord:
        mapping = {"scope": "scope_json", "doctor": "doctor_json", "result": "result_json", "sbatch": "sbatch_json"}
        with self._tx() as s:
            row = s.get(m.Campaign, campaign_id, with_for_update=self.dialect == "postgresql")
            if row is None:
                raise KeyError(f"no campaign {campaign_id}")
            old = row.state
            if old == "cancelled" and kw.get("state", old) != old:
                kw = {k: v for k, v in kw.items() if k not in ("state", "error")}  # a cancel is final
            for k, v in kw.items():
                setattr(row, mapping.get(k, k), v)
            if "state" in kw and kw["state"] != old:
                s.add(m.Event(campaign_id=campaign_id, kind="campaign.state",
                              payload={"from": old, "to": kw["state"], "error": kw.get("error")}))
            s.flush()
            return _campaign(row)

    # trials ------------------------------------------------------------------
    def add_trial_intent(self, campaign_id: int, trial_key: str, stage: str, config: dict[str, Any],
                         patches: list[str], signature: str, executor: str, outdir: str, gpus: int,
                         partition: str | None, group_key: str | None = None,
                         asked_after: int | None = None) -> TrialRecord:
        with self._tx() as s:
            existing = s.scalar(select(m.Trial).where(m.Trial.trial_key == trial_key))
            if existing is not None:
                return _trial(existing)
            seq = (s.scalar(select(func.max(m.Trial.seq)).where(m.Trial.campaign_id == campaign_id)) or 0) + 1
            row = m.Trial(campaign_id=campaign_id, seq=seq, trial_key=trial_key, stage=stage, config_json=config,
                          patches_json=list(patches), signature=signature, group_key=group_key, status="intent",
                          executor=executor, outdir=outdir, gpus=gpus, partition=partition, asked_after=asked_after)
            s.add(row)
            s.flush()
            s.add(m.Event(campaign_id=campaign_id, trial_id=row.id, kind="trial.intent",
                          payload={"stage": stage, "config": config, "patches": list(patches), "key": trial_key}))
            return _trial(row)

    def _trial_row(self, s: Session, trial_id: int) -> m.Trial:
        row = s.get(m.Trial, trial_id, with_for_update=self.dialect == "postgresql")
        if row is None:
            raise KeyError(f"no trial {trial_id}")
        return row

    def mark_submitted(self, trial_id: int, job_id: str, submit_time: float) -> TrialRecord:
        with self._tx() as s:
            row = self._trial_row(s, trial_id)
            if row.status == "intent":
                row.status, row.job_id, row.submit_time = "submitted", job_id, submit_time
                s.add(m.Event(campaign_id=row.campaign_id, trial_id=row.id, kind="trial.submitted",
                              payload={"job_id": job_id, "submit_time": submit_time}))
            return _trial(row)

    def mark_resubmitted(self, trial_id: int, job_id: str, submit_time: float, reason: str) -> TrialRecord:
        with self._tx() as s:
            row = self._trial_row(s, trial_id)
            row.status, row.job_id, row.submit_time = "submitted", job_id, submit_time
            row.attempt += 1
            s.add(m.Event(campaign_id=row.campaign_id, trial_id=row.id, kind="trial.requeued",
                          payload={"job_id": job_id, "reason": reason, "attempt": row.attempt}))
            return _trial(row)

    def mark_finished(self, trial_id: int, outcome: str, reason: str, start_time: float | None,
                      end_time: float | None) -> TrialRecord:
        with self._tx() as s:
            row = self._trial_row(s, trial_id)
            if row.status in ("intent", "submitted"):
                row.status, row.outcome, row.reason = "finished", outcome, reason
                row.start_time, row.end_time = start_time, end_time
                s.add(m.Event(campaign_id=row.campaign_id, trial_id=row.id, kind="trial.finished",
                              payload={"outcome": outcome, "reason": reason}))
            return _trial(row)

    def ingest(self, trial_id: int, ing: Ingest) -> bool:
        with self._tx() as s:
            row = self._trial_row(s, trial_id)
            if row.status == "ingested":
                return False
            row.status, row.outcome, row.reason = "ingested", ing.outcome, ing.reason
            row.start_time = ing.start_time if ing.start_time is not None else row.start_time
            row.end_time = ing.end_time if ing.end_time is not None else row.end_time
            if ing.receipt_raw is not None:
                s.add(m.Receipt(trial_id=row.id, raw=ing.receipt_raw, signature_ok=ing.signature_ok,
                                signature=ing.details.get("signature")))
            for v in ing.verdicts:
                s.add(m.Verdict(trial_id=row.id, invariant=v.invariant, layer=v.layer, status=v.status,
                                required=v.required, reason=v.reason))
            s.add(m.Observation(trial_id=row.id, campaign_id=row.campaign_id, step_time_s=ing.step_time_s,
                                peak_mem_gib=ing.peak_mem_gib, censor_kind=ing.censor_kind,
                                oom_shortfall_gib=ing.oom_shortfall_gib, loss_window_mean=ing.loss_window_mean,
                                accepted=ing.accepted, first_failed_layer=ing.first_failed_layer,
                                details_json=ing.details))
            failure = None if ing.outcome == "ok" else ing.outcome
            s.add(m.CostEntry(campaign_id=row.campaign_id, trial_id=row.id, stage=row.stage,
                              partition=row.partition, gpu_seconds=ing.gpu_seconds, cpu_seconds=ing.cpu_seconds,
                              failure_class=failure))
            s.add(m.Event(campaign_id=row.campaign_id, trial_id=row.id, kind="trial.ingested",
                          payload={"outcome": ing.outcome, "reason": ing.reason, "accepted": ing.accepted,
                                   "layer": ing.first_failed_layer, "gpu_seconds": ing.gpu_seconds,
                                   "cpu_seconds": ing.cpu_seconds}))
            s.flush()
            crash_point("in_ingest")
            return True

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self._tx() as s:
            row = s.get(m.Trial, trial_id)
            if row is None:
                raise KeyError(f"no trial {trial_id}")
            return _trial(row)

    def list_trials(self, campaign_id: int, statuses: Sequence[str] | None = None,
                    stages: Sequence[str] | None = None) -> list[TrialRecord]:
        with self._tx() as s:
            q = select(m.Trial).where(m.Trial.campaign_id == campaign_id).order_by(m.Trial.seq)
            if statuses:
                q = q.where(m.Trial.status.in_(list(statuses)))
            if stages:
                q = q.where(m.Trial.stage.in_(list(stages)))
            return [_trial(r) for r in s.scalars(q)]

    def live_trials(self, campaign_ids: Sequence[int] | None = None) -> list[TrialRecord]:
        with self._tx() as s:
            q = select(m.Trial).where(m.Trial.status.in_(["intent", "submitted"])).order_by(m.Trial.id)
            if campaign_ids is not None:
                q = q.where(m.Trial.campaign_id.in_(list(campaign_ids)))
            return [_trial(r) for r in s.scalars(q)]

    def observations(self, campaign_id: int) -> dict[int, ObservationRecord]:
        with self._tx() as s:
            rows = s.scalars(select(m.Observation).where(m.Observation.campaign_id == campaign_id))
            return {r.trial_id: _snap(ObservationRecord, r, details="details_json") for r in rows}

    def verdicts(self, trial_id: int) -> list[VerdictItem]:
        with self._tx() as s:
            rows = s.scalars(select(m.Verdict).where(m.Verdict.trial_id == trial_id).order_by(m.Verdict.id))
            return [_snap(VerdictItem, r) for r in rows]

    def receipt_raw(self, trial_id: int) -> bytes | None:
        with self._tx() as s:
            return s.scalar(select(m.Receipt.raw).where(m.Receipt.trial_id == trial_id))

    def list_receipts(self, campaign_id: int) -> list[StoredReceipt]:
        with self._tx() as s:
            camp = s.get(m.Campaign, campaign_id)
            if camp is None:
                raise KeyError(f"no campaign {campaign_id}")
            rows = s.execute(
                select(m.Trial, m.Receipt.raw).join(m.Receipt, m.Receipt.trial_id == m.Trial.id)
                .where(m.Trial.campaign_id == campaign_id).order_by(m.Trial.seq)
            ).all()
            refs = [raw for t, raw in rows if t.stage == "reference" and t.outcome == "ok"]
            spec = stored_judge_spec(camp.scope_json, camp.doctor_json)
            return [StoredReceipt(trial_id=t.trial_key, stage=t.stage, raw=raw, reference_raw=refs, judge_spec=spec)
                    for t, raw in rows]

    # events, costs, finance --------------------------------------------------
    def add_event(self, kind: str, payload: dict[str, Any] | None = None, campaign_id: int | None = None,
                  trial_id: int | None = None) -> None:
        with self._tx() as s:
            s.add(m.Event(kind=kind, payload=payload, campaign_id=campaign_id, trial_id=trial_id))

    def events(self, campaign_id: int, limit: int = 100) -> list[dict[str, Any]]:
        with self._tx() as s:
            rows = s.scalars(select(m.Event).where(m.Event.campaign_id == campaign_id)
                             .order_by(m.Event.id.desc()).limit(limit))
            out = [{"id": e.id, "at": e.created_at, "kind": e.kind, "trial_id": e.trial_id, "payload": e.payload}
                   for e in rows]
            return out[::-1]

    def add_llm_cost(self, campaign_id: int, stage: str, llm_tokens: int) -> None:
        with self._tx() as s:
            s.add(m.CostEntry(campaign_id=campaign_id, stage=stage, llm_tokens=llm_tokens))

    def add_proposer_request(self, campaign_id: int, *, scope: dict[str, Any] | None = None,
                             **fields: Any) -> ProposerRequestRecord:
        f = clean_proposer_request(**{"n_priors": 0, "n_patches": 0, **fields})
        with self._tx() as s:
            camp = s.get(m.Campaign, campaign_id, with_for_update=scope is not None and self.dialect == "postgresql")
            if camp is None:
                raise KeyError(f"no campaign {campaign_id}")
            if scope is not None:
                camp.scope_json = scope
            row = m.ProposerRequest(campaign_id=campaign_id, **f)
            s.add(row)
            if f["tokens_in"] + f["tokens_out"] > 0:
                s.add(m.CostEntry(campaign_id=campaign_id, stage=f["stage"],
                                  llm_tokens=f["tokens_in"] + f["tokens_out"]))
            s.flush()
            return _snap(ProposerRequestRecord, row)

    def proposer_requests(self, campaign_id: int) -> list[ProposerRequestRecord]:
        with self._tx() as s:
            rows = s.scalars(select(m.ProposerRequest).where(m.ProposerRequest.campaign_id == campaign_id)
                             .order_by(m.ProposerRequest.id))
            return [_snap(ProposerRequestRecord, r) for r in rows]

    def cost_by_stage(self, campaign_id: int) -> list[dict[str, Any]]:
        with self._tx() as s:
            rows = s.execute(
                select(m.CostEntry.stage, m.CostEntry.failure_class, func.count(m.CostEntry.id),
                       func.sum(m.CostEntry.gpu_seconds), func.sum(m.CostEntry.llm_tokens),
                       func.sum(m.CostEntry.cpu_seconds))
                .where(m.CostEntry.campaign_id == campaign_id)
                .group_by(m.CostEntry.stage, m.CostEntry.failure_class)
                .order_by(m.CostEntry.stage, m.CostEntry.failure_class)
            ).all()
            return [{"stage": st, "failure_class": fc, "entries": n, "gpu_hours": (gs or 0.0) / 3600.0,
                     "llm_tokens": int(tok or 0), "cpu_hours": (cs or 0.0) / 3600.0}
                    for st, fc, n, gs, tok, cs in rows]

    def finops(self, view: str) -> list[dict[str, Any]]:
        if view not in FINOPS_VIEWS:
            raise KeyError(f"unknown finops view '{view}' (one of {', '.join(FINOPS_VIEWS)})")
        with self._tx() as s:
            result = s.execute(text(f"SELECT * FROM {FINOPS_VIEWS[view]} ORDER BY campaign_id"))
            return [dict(r._mapping) for r in result]

    # experience --------------------------------------------------------------
    def add_experience(self, rows: Sequence[dict[str, Any]]) -> None:
        with self._tx() as s:
            for r in rows:
                s.add(m.Experience(**r))

    def experience(self, workload_class: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        with self._tx() as s:
            q = select(m.Experience).order_by(m.Experience.id)
            if workload_class:
                q = q.where(m.Experience.workload_class == workload_class)
            if gpu:
                q = q.where(m.Experience.gpu == gpu)
            return [{"knob": e.knob, "value": e.value, "workload_class": e.workload_class, "gpu": e.gpu,
                     "log_speedup": e.log_speedup, "mem_delta_gib": e.mem_delta_gib, "verified": e.verified,
                     "campaign_id": e.campaign_id} for e in s.scalars(q)]

    # coordination ------------------------------------------------------------
    def lease(self, name: str = "daemon", holder: str | None = None, lease_s: float = 15.0) -> SqlLease:
        return SqlLease(self.engine, name=name, holder=holder, lease_s=lease_s)

    def lease_info(self, name: str = "daemon") -> LeaseRecord | None:
        try:
            return read_lease(self.engine, name)
        except OperationalError as exc:
            raise StoreError(f"database {safe_url(self.url)} failed: {_one_line(exc)}") from None

    def set_fence(self, lease: LeaderLease | None) -> None:
        if lease is not None and not isinstance(lease, SqlLease):
            raise TypeError("SqlStore fences only with its own SqlLease")
        self._fence = lease

    # identities and audit ------------------------------------------------------
    def identity(self) -> str:
        if self._identity is None:
            if self.dialect == "postgresql":
                with self._tx() as s:
                    self._identity = str(s.scalar(text("SELECT current_user")))
            else:
                from infrarsi.controller.settings import os_user

                self._identity = os_user()
        return self._identity

    def sees_all(self) -> bool:
        if self.dialect != "postgresql":
            return True
        with self._tx() as s:
            return bool(s.scalar(text("SELECT infrarsi_sees_all(current_user)")))

    def cancel_campaign(self, campaign_id: int, reason: str | None = None) -> CampaignRecord:
        if self.dialect != "postgresql":
            c = self.get_campaign(campaign_id)
            if c.terminal:
                return c
            return self.update_campaign(campaign_id, state="cancelled", error=reason or f"cancelled by {self.identity()}")
        try:
            with self._tx() as s:
                s.execute(text("SELECT infrarsi_cancel_campaign(:c, :r)"), {"c": campaign_id, "r": reason})
        except DBAPIError as exc:
            state = getattr(getattr(exc, "orig", None), "sqlstate", None)
            if state == "P0002":
                raise KeyError(f"no campaign {campaign_id}") from None
            if state == "42501":
                raise StoreError(f"role {self.identity()} may not cancel campaigns in {safe_url(self.url)}: "
                                 f"grant it infrarsi_researcher or infrarsi_admin (deploy/roles.sql)") from None
            raise StoreError(f"cannot cancel campaign {campaign_id}: {_one_line(exc)}") from None
        return self.get_campaign(campaign_id)

    def audit(self, campaign_id: int | None = None, actor: str | None = None, since: Any = None,
              kinds: Sequence[str] | None = None, limit: int = 1000) -> list[AuditEvent]:
        with self._tx() as s:
            q = select(m.Event).order_by(m.Event.id.desc()).limit(limit)
            if campaign_id is not None:
                q = q.where(m.Event.campaign_id == campaign_id)
            if actor is not None:
                q = q.where(m.Event.actor == actor)
            if since is not None:
                q = q.where(m.Event.created_at >= since)
            if kinds:
                q = q.where(m.Event.kind.in_(list(kinds)))
            return [AuditEvent(id=e.id, at=e.created_at, actor=e.actor, kind=e.kind, campaign_id=e.campaign_id,
                               trial_id=e.trial_id, payload=e.payload) for e in s.scalars(q)][::-1]


def open_store(url: str | None = None, auto_upgrade: bool | None = None) -> SqlStore:
    """Open the configured store, checking it is at the head revision.

    ``url`` defaults to the settings (``INFRARSI_DATABASE_URL`` or SQLite under ``INFRARSI_HOME``).  The embedded
    SQLite default is upgraded automatically (``auto_upgrade`` None means: only for SQLite); a PostgreSQL
    database behind head raises StoreError telling the admin to run ``infrarsi db upgrade``.
    """
    from infrarsi.controller.settings import Settings, normalize_url

    url = normalize_url(url) if url else Settings.from_env().database_url
    if auto_upgrade is None:
        auto_upgrade = url.startswith("sqlite")
    rev = current_revision(url)
    head = head_revision()
    if rev != head:
        if auto_upgrade:
            upgrade(url)
        else:
            raise StoreError(f"database {safe_url(url)} is at revision {rev or 'none'}, expected {head}: "
                             f"run 'infrarsi db upgrade'")
    return SqlStore(url)
