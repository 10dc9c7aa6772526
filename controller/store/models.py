"""SQLAlchemy 2.0 ORM models.  Only :mod:`infrarsi.controller.store` imports this module.

The schema itself is owned by Alembic (``migrations/versions``); these classes must match the head revision
(``tests/store/test_migrations.py`` compares them).  Times are stored as UTC ``DateTime`` for people (finance
queries) and as float unix seconds where the executor needs exact keys (``submit_time`` with ``job_id``
identifies a Slurm job, because Slurm reuses ids).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON, Boolean, DateTime, TypeDecorator, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite drops tzinfo; it is restored on load)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


def utcnow() -> datetime:
    """Timezone-aware current UTC time."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base for all infrarsi tables."""


class Workload(Base):
    """A training workload registered by an admin: its contract and scheduling limits."""

    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    owner: Mapped[str] = mapped_column(String(100))
    contract_yaml: Mapped[str] = mapped_column(Text)
    contract_digest: Mapped[str] = mapped_column(String(64))
    partition: Mapped[str | None] = mapped_column(String(100), nullable=True)
    max_concurrent: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Campaign(Base):
    """One tuning campaign: a state machine advanced by the engine (embedded) or the daemon."""

    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workloads.id"), nullable=True)
    owner: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(20), index=True)
    contract_path: Mapped[str] = mapped_column(Text)
    contract_yaml: Mapped[str] = mapped_column(Text)
    contract_digest: Mapped[str] = mapped_column(String(64))
    repo_path: Mapped[str] = mapped_column(Text)
    workdir: Mapped[str] = mapped_column(Text)
    executor: Mapped[str] = mapped_column(String(20), default="local")
    partition: Mapped[str | None] = mapped_column(String(100), nullable=True)
    budget_gpu_hours: Mapped[float] = mapped_column(Float)
    budget_trials: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    scope_json: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    doctor_json: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    result_json: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    delivered_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    #: sbatch-style options of ``infrarsi submit`` applied to every trial job (migration 0007); None: none
    sbatch_json: Mapped[dict | None] = mapped_column(JSON, nullable=True)

    trials: Mapped[list["Trial"]] = relationship(back_populates="campaign", order_by="Trial.seq")


class Trial(Base):
    """One launch of one candidate.  ``status`` is the lifecycle (intent -> submitted -> finished -> ingested);
    ``outcome`` is what happened (ok, oom, crash, timeout, cancelled, rejected)."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("campaign_id", "seq", name="uq_trials_campaign_seq"),
        Index("ix_trials_campaign_status", "campaign_id", "status"),
        Index("ix_trials_status", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id"))
    seq: Mapped[int] = mapped_column(Integer)
    trial_key: Mapped[str] = mapped_column(String(64), unique=True)
    stage: Mapped[str] = mapped_column(String(20))
    config_json: Mapped[dict] = mapped_column(JSON)
    patches_json: Mapped[list] = mapped_column(JSON)
    signature: Mapped[str] = mapped_column(String(64), index=True)
    group_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    outcome: Mapped[str | None] = mapped_column(String(20), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    executor: Mapped[str] = mapped_column(String(20))
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    submit_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    start_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    partition: Mapped[str | None] = mapped_column(String(100), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    outdir: Mapped[str] = mapped_column(Text)
    #: search trials told when the search proposed this one (migration 0010); NULL for other stages and old rows
    asked_after: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    campaign: Mapped[Campaign] = relationship(back_populates="trials")


class Receipt(Base):
    """The raw signed receipt bytes of a trial, exactly as the exec wrapper wrote them."""

    __tablename__ = "receipts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"), unique=True)
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    signature: Mapped[str | None] = mapped_column(String(128), nullable=True)
    signature_ok: Mapped[bool] = mapped_column(Boolean, default=False)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Verdict(Base):
    """One invariant's result for one trial."""

    __tablename__ = "verdicts"
    __table_args__ = (UniqueConstraint("trial_id", "invariant", name="uq_verdicts_trial_invariant"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"), index=True)
    invariant: Mapped[str] = mapped_column(String(40))
    layer: Mapped[str] = mapped_column(String(4))
    status: Mapped[str] = mapped_column(String(12))
    required: Mapped[bool] = mapped_column(Boolean, default=True)
    reason: Mapped[str] = mapped_column(Text, default="")


class Observation(Base):
    """What the models learn from a trial: step time and (possibly censored) peak memory."""

    __tablename__ = "observations"
    __table_args__ = (Index("ix_observations_campaign", "campaign_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"), unique=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id"))
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_mem_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    censor_kind: Mapped[str | None] = mapped_column(String(12), nullable=True)
    oom_shortfall_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss_window_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    accepted: Mapped[bool] = mapped_column(Boolean, default=False)
    first_failed_layer: Mapped[str | None] = mapped_column(String(4), nullable=True)
    details_json: Mapped[dict | None] = mapped_column(JSON, nullable=True)


class CostEntry(Base):
    """GPU-seconds and LLM tokens spent, one row per trial (and per LLM call); failed trials included."""

    __tablename__ = "cost_ledger"
    __table_args__ = (Index("ix_cost_campaign", "campaign_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id"))
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id"), nullable=True, unique=True)
    stage: Mapped[str] = mapped_column(String(20))
    partition: Mapped[str | None] = mapped_column(String(100), nullable=True)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    #: CPU trials (no GPU) are booked here, one slot per trial, never as GPU-seconds (migration 0007)
    cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    llm_tokens: Mapped[int] = mapped_column(Integer, default=0)
    failure_class: Mapped[str | None] = mapped_column(String(20), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProposerRequest(Base):
    """One request to a proposer (migration 0006): who was asked what, what it cost and how it ended."""

    __tablename__ = "proposer_requests"
    __table_args__ = (Index("ix_proposer_requests_campaign", "campaign_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id"))
    stage: Mapped[str] = mapped_column(String(20))
    proposer: Mapped[str] = mapped_column(String(60))
    kind: Mapped[str] = mapped_column(String(20))
    request: Mapped[str] = mapped_column(String(20))
    model: Mapped[str] = mapped_column(String(200))
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    outcome: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    prompt_digest: Mapped[str] = mapped_column(String(64), default="")
    n_priors: Mapped[int] = mapped_column(Integer, default=0)
    n_patches: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Event(Base):
    """Append-only log of everything that happened (a trigger refuses UPDATE and DELETE).  ``actor`` is who did it
    (migration 0004): on PostgreSQL a trigger sets it to ``session_user``; on SQLite the store writes the OS user."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_campaign", "campaign_id"), Index("ix_events_actor", "actor"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), nullable=True)
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id"), nullable=True)
    kind: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    actor: Mapped[str | None] = mapped_column(String(100), nullable=True)


class Experience(Base):
    """Verified write-back: what a knob setting or patch did on a workload class and GPU (paper section 5.3)."""

    __tablename__ = "experience"
    __table_args__ = (Index("ix_experience_knob", "knob", "value"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), nullable=True)
    workload_class: Mapped[str] = mapped_column(String(100))
    gpu: Mapped[str] = mapped_column(String(100))
    knob: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(String(200))
    log_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_delta_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    verified: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ExpEnvironment(Base):
    """Experience protocol (migration 0005): one distinct environment, keyed by its content digest
    (:class:`infrarsi.controller.experience.records.Environment`)."""

    __tablename__ = "exp_environments"
    __table_args__ = (UniqueConstraint("digest", name="uq_exp_environments_digest"),
                      Index("ix_exp_environments_family", "framework", "model_family"),
                      Index("ix_exp_environments_sku", "gpu_sku"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    gpu_sku: Mapped[str] = mapped_column(String(100))
    gpu_mem_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_tflops: Mapped[float | None] = mapped_column(Float, nullable=True)
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus_per_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    nodes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    interconnect: Mapped[str | None] = mapped_column(String(100), nullable=True)
    software: Mapped[dict] = mapped_column(JSON, default=dict)
    framework: Mapped[str | None] = mapped_column(String(100), nullable=True)
    model_family: Mapped[str | None] = mapped_column(String(100), nullable=True)
    params: Mapped[float | None] = mapped_column(Float, nullable=True)
    seq_len: Mapped[int | None] = mapped_column(Integer, nullable=True)
    parallel: Mapped[str | None] = mapped_column(String(100), nullable=True)
    reference_state: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ExpObservation(Base):
    """Experience protocol (migration 0005): one normalized measured configuration, unique per (campaign, trial)."""

    __tablename__ = "exp_observations"
    __table_args__ = (UniqueConstraint("campaign", "trial", name="uq_exp_observations_key"),
                      Index("ix_exp_observations_campaign", "campaign_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("exp_environments.id"))
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), nullable=True)
    campaign: Mapped[str] = mapped_column(String(200))
    trial: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    canonical: Mapped[dict] = mapped_column(JSON, default=dict)
    patches: Mapped[list] = mapped_column(JSON, default=list)
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_mem_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    verdicts: Mapped[dict] = mapped_column(JSON, default=dict)
    oom_shortfall_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    conflicts: Mapped[list] = mapped_column(JSON, default=list)
    #: migration 0009: "needs a partner" crash explanations, [[[mechanism, value], [partner, value]], ...]
    requirements: Mapped[list] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ExpEffect(Base):
    """Experience protocol (migration 0005): one verified, noise-gated effect; (campaign, trial, mechanism, value)
    is unique so that write-back is idempotent."""

    __tablename__ = "exp_effects"
    __table_args__ = (UniqueConstraint("campaign", "trial", "mechanism", "value", name="uq_exp_effects_key"),
                      Index("ix_exp_effects_mechanism", "mechanism", "value"),
                      Index("ix_exp_effects_campaign", "campaign_id"),
                      Index("ix_exp_effects_environment", "environment_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("exp_environments.id"))
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), nullable=True)
    campaign: Mapped[str] = mapped_column(String(200))
    trial: Mapped[str] = mapped_column(String(200))
    mechanism: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(String(200))
    klass: Mapped[str] = mapped_column(String(20))
    log_speedup: Mapped[float] = mapped_column(Float)
    noise_floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    conditioning: Mapped[dict] = mapped_column(JSON, default=dict)
    tier: Mapped[str] = mapped_column(String(40))
    knob: Mapped[str | None] = mapped_column(String(100), nullable=True)
    raw_value: Mapped[str | None] = mapped_column(String(200), nullable=True)
    mem_delta_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LeaderLease(Base):
    """A named lease with a fencing token (migration 0003).  ``expires_at`` is database-clock unix seconds;
    ``token`` only increases, once per acquisition (see :mod:`infrarsi.controller.store.lease`)."""

    __tablename__ = "leader_lease"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(200), nullable=True)
    token: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    expires_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    renewed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
