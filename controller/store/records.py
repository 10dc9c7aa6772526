"""Immutable snapshots handed out by the store.

The engine, the search glue, reports and the CLI see only these frozen dataclasses, never ORM objects, so
nothing outside :mod:`infrarsi.controller.store` can lazily load or accidentally write rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

CAMPAIGN_STATES = ("init", "doctor", "run", "verify", "report", "done", "failed", "cancelled")
TERMINAL_STATES = ("done", "failed", "cancelled")
TRIAL_STAGES = ("reference", "search", "promotion", "profiling")
TRIAL_STATUSES = ("intent", "submitted", "finished", "ingested")
OUTCOMES = ("ok", "oom", "crash", "timeout", "cancelled", "rejected")


@dataclass(frozen=True)
class WorkloadRecord:
    id: int
    name: str
    owner: str
    contract_yaml: str
    contract_digest: str
    partition: str | None
    max_concurrent: int
    created_at: datetime


@dataclass(frozen=True)
class CampaignRecord:
    id: int
    name: str
    workload_id: int | None
    owner: str
    state: str
    contract_path: str
    contract_yaml: str
    contract_digest: str
    repo_path: str
    workdir: str
    executor: str
    partition: str | None
    budget_gpu_hours: float
    budget_trials: int
    seed: int
    scope: dict[str, Any] | None
    doctor: dict[str, Any] | None
    result: dict[str, Any] | None
    delivered_speedup: float | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    #: sbatch-style options of ``infrarsi submit`` (``controller/campaign/sbatch_options.py``); None: none
    sbatch: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class TrialRecord:
    id: int
    campaign_id: int
    seq: int
    trial_key: str
    stage: str
    config: dict[str, Any]
    patches: list[str]
    signature: str
    group_key: str | None
    status: str
    outcome: str | None
    reason: str | None
    executor: str
    job_id: str | None
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    gpus: int
    partition: str | None
    attempt: int
    outdir: str
    #: search trials the controller had been told when it proposed this one (None: not recorded)
    asked_after: int | None = None

    @property
    def live(self) -> bool:
        """Submitted (or intended) and not yet finished."""
        return self.status in ("intent", "submitted")


@dataclass(frozen=True)
class VerdictItem:
    invariant: str
    layer: str
    status: str
    required: bool
    reason: str


@dataclass(frozen=True)
class ObservationRecord:
    id: int
    trial_id: int
    step_time_s: float | None
    peak_mem_gib: float | None
    censor_kind: str | None
    oom_shortfall_gib: float | None
    loss_window_mean: float | None
    accepted: bool
    first_failed_layer: str | None
    details: dict[str, Any] | None


@dataclass(frozen=True)
class Ingest:
    """Everything recorded when a finished trial is ingested, written in one transaction."""

    outcome: str
    reason: str
    receipt_raw: bytes | None
    signature_ok: bool
    verdicts: tuple[VerdictItem, ...] = ()
    step_time_s: float | None = None
    peak_mem_gib: float | None = None
    censor_kind: str | None = None
    oom_shortfall_gib: float | None = None
    loss_window_mean: float | None = None
    accepted: bool = False
    first_failed_layer: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    #: a CPU trial's seconds (one slot), booked apart from GPU-seconds
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class StoredReceipt:
    """A stored receipt with what re-judging needs (``infrarsi verify --rejudge``)."""

    trial_id: str
    stage: str
    raw: bytes
    reference_raw: list[bytes]
    judge_spec: dict[str, Any]


@dataclass(frozen=True)
class LeaseRecord:
    """The leader lease row as the database sees it now (``db_now`` is the database clock, unix seconds)."""

    name: str
    holder: str | None
    token: int
    expires_at: float
    db_now: float

    @property
    def held(self) -> bool:
        return self.holder is not None and self.expires_at > self.db_now


@dataclass(frozen=True)
class AuditEvent:
    """One row of the audit trail (``infrarsi audit``): who did what, when.  ``actor`` is the database session
    user on PostgreSQL and the OS user on SQLite (None for events recorded before migration 0004)."""

    id: int
    at: datetime
    actor: str | None
    kind: str
    campaign_id: int | None
    trial_id: int | None
    payload: dict[str, Any] | None


@dataclass(frozen=True)
class ProposerRequestRecord:
    """One row of the proposer ledger (migration 0006): a request to a proposer at ``stage`` asking for
    ``request`` (priors, patches, complete), its tokens, money (None: no price configured), wall time, ``outcome``
    (ok/failed) with a one-line ``reason``, the prompt's digest and how many priors and patches it yielded."""

    id: int
    campaign_id: int
    stage: str
    proposer: str
    kind: str
    request: str
    model: str
    tokens_in: int
    tokens_out: int
    usd: float | None
    wall_s: float
    outcome: str
    reason: str
    prompt_digest: str
    n_priors: int
    n_patches: int
    created_at: datetime
