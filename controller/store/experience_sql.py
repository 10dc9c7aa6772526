"""The experience-protocol part of :class:`~infrarsi.controller.store.sql.SqlStore` (migration 0005).

A mixin so that the store's main module stays small; the contract is in :class:`infrarsi.controller.store.base.Store`
(section "experience protocol").  Idempotency comes from the database: ``INSERT ... ON CONFLICT DO NOTHING`` on the
unique keys (environment digest; observation (campaign, trial); effect (campaign, trial, mechanism, value)), so two
writers racing on the same record, or a re-run after a crash, leave exactly one row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from infrarsi.controller.experience.records import Effect, Environment, Observation, requirement_tuples
from infrarsi.controller.store import models as m


def _insert(session: Session, table: Any) -> Any:
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def _env_record(row: m.ExpEnvironment) -> Environment:
    return Environment(gpu_sku=row.gpu_sku, gpu_mem_gib=row.gpu_mem_gib, peak_tflops=row.peak_tflops,
                       bandwidth_gbs=row.bandwidth_gbs, gpus_per_node=row.gpus_per_node, nodes=row.nodes,
                       interconnect=row.interconnect, software=dict(row.software or {}), framework=row.framework,
                       model_family=row.model_family, params=row.params, seq_len=row.seq_len, parallel=row.parallel,
                       reference_state=dict(row.reference_state or {}))


def _effect_record(row: m.ExpEffect, env: m.ExpEnvironment) -> Effect:
    return Effect(environment=env.digest, mechanism=row.mechanism, value=row.value, klass=row.klass,
                  log_speedup=row.log_speedup, noise_floor=row.noise_floor, conditioning=dict(row.conditioning or {}),
                  tier=row.tier, campaign=row.campaign, trial=row.trial, knob=row.knob, raw_value=row.raw_value,
                  mem_delta_gib=row.mem_delta_gib, created_at=row.created_at, id=row.id, env=_env_record(env))


def _observation_record(row: m.ExpObservation, digest: str) -> Observation:
    return Observation(environment=digest, campaign=row.campaign, trial=row.trial, config=dict(row.config or {}),
                       canonical=dict(row.canonical or {}), patches=tuple(row.patches or ()),
                       step_time_s=row.step_time_s, peak_mem_gib=row.peak_mem_gib, verdicts=dict(row.verdicts or {}),
                       oom_shortfall_gib=row.oom_shortfall_gib,
                       conflicts=tuple(tuple((str(a), str(b)) for a, b in c) for c in row.conflicts or ()),
                       requirements=requirement_tuples(row.requirements),
                       created_at=row.created_at, id=row.id)


class ExperienceSqlMixin:
    """add_environment / add_observations / add_effects / effects / experience_observations / environments /
    prune_experience for :class:`SqlStore` (uses its ``_tx``)."""

    def _env_id(self, s: Session, env: Environment) -> int:
        digest = env.digest()
        d = env.to_dict()
        s.execute(_insert(s, m.ExpEnvironment.__table__).values(digest=digest, created_at=m.utcnow(), **d)
                  .on_conflict_do_nothing(index_elements=["digest"]))
        return int(s.scalar(select(m.ExpEnvironment.id).where(m.ExpEnvironment.digest == digest)))

    def _env_ids(self, s: Session, digests: set[str]) -> dict[str, int]:
        if not digests:
            return {}
        rows = s.execute(select(m.ExpEnvironment.digest, m.ExpEnvironment.id)
                         .where(m.ExpEnvironment.digest.in_(sorted(digests)))).all()
        found = {d: i for d, i in rows}
        missing = digests - set(found)
        if missing:
            raise ValueError(f"unknown environment digest {sorted(missing)[0][:12]}... (add_environment it first)")
        return found

    def add_environment(self, env: Environment) -> str:
        with self._tx() as s:  # type: ignore[attr-defined]
            self._env_id(s, env)
        return env.digest()

    def environments(self, digests: Sequence[str] | None = None) -> dict[str, Environment]:
        with self._tx() as s:  # type: ignore[attr-defined]
            q = select(m.ExpEnvironment).order_by(m.ExpEnvironment.id)
            if digests is not None:
                q = q.where(m.ExpEnvironment.digest.in_(list(digests)))
            return {r.digest: _env_record(r) for r in s.scalars(q)}

    def add_observations(self, observations: Sequence[Observation], campaign_id: int | None = None) -> int:
        with self._tx() as s:  # type: ignore[attr-defined]
            ids = self._env_ids(s, {o.environment for o in observations})
            n = 0
            for o in observations:
                res = s.execute(_insert(s, m.ExpObservation.__table__).values(
                    environment_id=ids[o.environment], campaign_id=campaign_id, campaign=o.campaign, trial=o.trial,
                    config=dict(o.config), canonical=dict(o.canonical), patches=list(o.patches),
                    step_time_s=o.step_time_s, peak_mem_gib=o.peak_mem_gib, verdicts=dict(o.verdicts),
                    oom_shortfall_gib=o.oom_shortfall_gib, conflicts=[[list(p) for p in c] for c in o.conflicts],
                    requirements=[[list(p) for p in r] for r in o.requirements], created_at=o.created_at or m.utcnow()).on_conflict_do_nothing(index_elements=["campaign", "trial"])
                    .returning(m.ExpObservation.__table__.c.id))
                n += len(res.all())
            return n

    def add_effects(self, effects: Sequence[Effect], campaign_id: int | None = None) -> int:
        with self._tx() as s:  # type: ignore[attr-defined]
            for e in effects:
                if e.env is not None:
                    self._env_id(s, e.env)
            ids = self._env_ids(s, {e.environment for e in effects})
            n = 0
            for e in effects:
                res = s.execute(_insert(s, m.ExpEffect.__table__).values(
                    environment_id=ids[e.environment], campaign_id=campaign_id, campaign=e.campaign, trial=e.trial,
                    mechanism=e.mechanism, value=e.value, klass=e.klass, log_speedup=float(e.log_speedup),
                    noise_floor=e.noise_floor, conditioning=dict(e.conditioning), tier=e.tier, knob=e.knob,
                    raw_value=e.raw_value, mem_delta_gib=e.mem_delta_gib, created_at=e.created_at or m.utcnow())
                    .on_conflict_do_nothing(index_elements=["campaign", "trial", "mechanism", "value"])
                    .returning(m.ExpEffect.__table__.c.id))
                n += len(res.all())
            return n

    def effects(self, *, mechanisms: Sequence[str] | None = None, framework: str | None = None,
                model_family: str | None = None, gpu_sku: str | None = None, campaign: str | None = None,
                campaign_id: int | None = None, tiers: Sequence[str] | None = None,
                before: datetime | None = None) -> list[Effect]:
        with self._tx() as s:  # type: ignore[attr-defined]
            q = (select(m.ExpEffect, m.ExpEnvironment).join(m.ExpEnvironment,
                                                            m.ExpEnvironment.id == m.ExpEffect.environment_id)
                 .order_by(m.ExpEffect.id))
            if mechanisms is not None:
                q = q.where(m.ExpEffect.mechanism.in_(list(mechanisms)))
            if framework is not None:
                q = q.where(m.ExpEnvironment.framework == framework)
            if model_family is not None:
                q = q.where(m.ExpEnvironment.model_family == model_family)
            if gpu_sku is not None:
                q = q.where(m.ExpEnvironment.gpu_sku == gpu_sku)
            if campaign is not None:
                q = q.where(m.ExpEffect.campaign == campaign)
            if campaign_id is not None:
                q = q.where(m.ExpEffect.campaign_id == campaign_id)
            if tiers is not None:
                q = q.where(m.ExpEffect.tier.in_(list(tiers)))
            if before is not None:
                q = q.where(m.ExpEffect.created_at < before)
            return [_effect_record(e, env) for e, env in s.execute(q).all()]

    def experience_observations(self, *, campaign: str | None = None, campaign_id: int | None = None,
                                environment: str | None = None) -> list[Observation]:
        with self._tx() as s:  # type: ignore[attr-defined]
            q = (select(m.ExpObservation, m.ExpEnvironment.digest)
                 .join(m.ExpEnvironment, m.ExpEnvironment.id == m.ExpObservation.environment_id)
                 .order_by(m.ExpObservation.id))
            if campaign is not None:
                q = q.where(m.ExpObservation.campaign == campaign)
            if campaign_id is not None:
                q = q.where(m.ExpObservation.campaign_id == campaign_id)
            if environment is not None:
                q = q.where(m.ExpEnvironment.digest == environment)
            return [_observation_record(o, d) for o, d in s.execute(q).all()]

    def prune_experience(self, *, before: datetime | None = None, gpu_sku: str | None = None,
                         campaign: str | None = None, campaign_id: int | None = None) -> dict[str, int]:
        if before is None and gpu_sku is None and campaign is None and campaign_id is None:
            raise ValueError("prune needs at least one of: before, gpu_sku, campaign")
        with self._tx() as s:  # type: ignore[attr-defined]
            counts = {}
            for name, table in (("effects", m.ExpEffect), ("observations", m.ExpObservation)):
                q = delete(table)
                if before is not None:
                    q = q.where(table.created_at < before)
                if gpu_sku is not None:
                    q = q.where(table.environment_id.in_(
                        select(m.ExpEnvironment.id).where(m.ExpEnvironment.gpu_sku == gpu_sku)))
                if campaign is not None:
                    q = q.where(table.campaign == campaign)
                if campaign_id is not None:
                    q = q.where(table.campaign_id == campaign_id)
                counts[name] = s.execute(q.execution_options(synchronize_session=False)).rowcount or 0
            used = select(m.ExpEffect.environment_id).union(select(m.ExpObservation.environment_id))
            counts["environments"] = s.execute(delete(m.ExpEnvironment).where(m.ExpEnvironment.id.not_in(used))
                                               .execution_options(synchronize_session=False)).rowcount or 0
            return counts
