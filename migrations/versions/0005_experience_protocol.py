"""experience protocol (issue 13): environments, observations, effects

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

Three tables (``docs/experience.md``; records in ``controller/experience/records.py``):

- ``exp_environments``: one row per distinct Environment, keyed by its content ``digest`` (sha256 of the canonical
  JSON), so packs move between databases without renumbering.  Indexed for retrieval by (framework, model_family)
  and gpu_sku.
- ``exp_observations``: one normalized measured configuration per (campaign label, trial key) (unique).
- ``exp_effects``: verified, noise-gated effects.  ``UNIQUE (campaign, trial, mechanism, value)`` makes write-back
  idempotent (a crash or a re-run of ``run`` never duplicates a record).  Indexed by (mechanism, value).

Existing ``experience`` rows that are verified and carry a log-speedup become effects of tier ``legacy``:
workload_class -> model_family, framework ``torch`` (every campaign before this revision ran the torch adapters),
gpu -> gpu_sku; the mechanism comes from the campaign's contract (the knob's ``mechanism``/``canonical`` fields)
when the campaign is known, else from the knob name through the catalog's aliases, else the knob name itself
(an uncatalogued mechanism, class balance); the trial is ``experience:<id>``; noise_floor is the campaign's
doctor sigma_pair when recorded.  The ``experience`` table itself stays (nothing is lost; unverified rows live only
there).  Downgrade drops the three tables (the legacy rows are still in ``experience``).

PostgreSQL: row-level security as 0004 gives campaign-owned tables: observations and effects are readable by
roles that see all, and otherwise when their campaign is visible or when they belong to no local campaign
(imported or legacy shared knowledge); writes are for roles that see all.  Grants: ``deploy/roles.sql``.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SEES_ALL = "(SELECT infrarsi_sees_all(current_user))"
VISIBLE = "campaign_id IS NULL OR EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)"
OWNED = ("exp_observations", "exp_effects")


def _create_tables() -> None:
    op.create_table(
        "exp_environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("gpu_sku", sa.String(length=100), nullable=False),
        sa.Column("gpu_mem_gib", sa.Float(), nullable=True),
        sa.Column("peak_tflops", sa.Float(), nullable=True),
        sa.Column("bandwidth_gbs", sa.Float(), nullable=True),
        sa.Column("gpus_per_node", sa.Integer(), nullable=True),
        sa.Column("nodes", sa.Integer(), nullable=True),
        sa.Column("interconnect", sa.String(length=100), nullable=True),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("framework", sa.String(length=100), nullable=True),
        sa.Column("model_family", sa.String(length=100), nullable=True),
        sa.Column("params", sa.Float(), nullable=True),
        sa.Column("seq_len", sa.Integer(), nullable=True),
        sa.Column("parallel", sa.String(length=100), nullable=True),
        sa.Column("reference_state", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest", name="uq_exp_environments_digest"),
    )
    op.create_index("ix_exp_environments_family", "exp_environments", ["framework", "model_family"])
    op.create_index("ix_exp_environments_sku", "exp_environments", ["gpu_sku"])
    op.create_table(
        "exp_observations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("campaign", sa.String(length=200), nullable=False),
        sa.Column("trial", sa.String(length=200), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("canonical", sa.JSON(), nullable=False),
        sa.Column("patches", sa.JSON(), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=True),
        sa.Column("peak_mem_gib", sa.Float(), nullable=True),
        sa.Column("verdicts", sa.JSON(), nullable=False),
        sa.Column("oom_shortfall_gib", sa.Float(), nullable=True),
        sa.Column("conflicts", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["environment_id"], ["exp_environments.id"]),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("campaign", "trial", name="uq_exp_observations_key"),
    )
    op.create_index("ix_exp_observations_campaign", "exp_observations", ["campaign_id"])
    op.create_table(
        "exp_effects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("campaign", sa.String(length=200), nullable=False),
        sa.Column("trial", sa.String(length=200), nullable=False),
        sa.Column("mechanism", sa.String(length=100), nullable=False),
        sa.Column("value", sa.String(length=200), nullable=False),
        sa.Column("klass", sa.String(length=20), nullable=False),
        sa.Column("log_speedup", sa.Float(), nullable=False),
        sa.Column("noise_floor", sa.Float(), nullable=True),
        sa.Column("conditioning", sa.JSON(), nullable=False),
        sa.Column("tier", sa.String(length=40), nullable=False),
        sa.Column("knob", sa.String(length=100), nullable=True),
        sa.Column("raw_value", sa.String(length=200), nullable=True),
        sa.Column("mem_delta_gib", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["environment_id"], ["exp_environments.id"]),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("campaign", "trial", "mechanism", "value", name="uq_exp_effects_key"),
    )
    op.create_index("ix_exp_effects_mechanism", "exp_effects", ["mechanism", "value"])
    op.create_index("ix_exp_effects_campaign", "exp_effects", ["campaign_id"])
    op.create_index("ix_exp_effects_environment", "exp_effects", ["environment_id"])


def _contract_knobs(contract_yaml: str | None) -> dict[str, dict[str, Any]]:
    """Knob name -> raw knob mapping from a stored contract, {} when it does not parse."""
    if not contract_yaml:
        return {}
    try:
        from ruamel.yaml import YAML

        doc = YAML(typ="safe").load(contract_yaml)
        return {str(k["name"]): k for k in doc.get("knobs") or [] if isinstance(k, dict) and "name" in k}
    except Exception:
        return {}


def _migrate_rows() -> None:
    from infrarsi.controller.experience.mechanisms import mechanism_for, mechanism_class, canonical_value
    from infrarsi.controller.experience.records import Environment

    bind = op.get_bind()
    rows = bind.execute(sa.text(
        "SELECT e.id, e.campaign_id, e.workload_class, e.gpu, e.knob, e.value, e.log_speedup, e.mem_delta_gib, "
        "e.created_at, c.name AS cname, c.contract_yaml, c.doctor_json FROM experience e "
        "LEFT JOIN campaigns c ON c.id = e.campaign_id "
        "WHERE e.verified AND e.log_speedup IS NOT NULL ORDER BY e.id")).mappings().all()
    envs: dict[str, int] = {}
    now = datetime.now(timezone.utc)
    typed = {"software": sa.JSON(), "reference_state": sa.JSON(), "conditioning": sa.JSON(),
             "created_at": sa.DateTime(timezone=True)}
    env_t = sa.table("exp_environments", *[sa.column(n, typed.get(n)) for n in (
        "digest", "gpu_sku", "software", "framework", "model_family", "reference_state", "created_at")])
    eff_t = sa.table("exp_effects", *[sa.column(n, typed.get(n)) for n in (
        "environment_id", "campaign_id", "campaign", "trial", "mechanism", "value", "klass", "log_speedup",
        "noise_floor", "conditioning", "tier", "knob", "raw_value", "mem_delta_gib", "created_at")])
    for r in rows:
        env = Environment(gpu_sku=r["gpu"], framework="torch", model_family=r["workload_class"])
        digest = env.digest()
        if digest not in envs:
            bind.execute(sa.insert(env_t).values(digest=digest, gpu_sku=env.gpu_sku, software={}, framework="torch",
                                                 model_family=env.model_family, reference_state={}, created_at=now))
            envs[digest] = bind.execute(sa.text("SELECT id FROM exp_environments WHERE digest = :d"),
                                        {"d": digest}).scalar_one()
        knob = _contract_knobs(r["contract_yaml"]).get(r["knob"], {})
        mech = mechanism_for(r["knob"], knob.get("mechanism"))
        canon = knob.get("canonical") if isinstance(knob.get("canonical"), dict) else None
        doctor = r["doctor_json"]
        if isinstance(doctor, str):
            try:
                doctor = json.loads(doctor)
            except ValueError:
                doctor = None
        sigma = doctor.get("sigma_pair") if isinstance(doctor, dict) else None
        label = f"{r['cname']}#{r['campaign_id']}" if r["campaign_id"] is not None and r["cname"] else "legacy"
        created = r["created_at"]
        if isinstance(created, str):
            created = datetime.fromisoformat(created)
        bind.execute(sa.insert(eff_t).values(
            environment_id=envs[digest], campaign_id=r["campaign_id"] if r["cname"] else None, campaign=label,
            trial=f"experience:{r['id']}", mechanism=mech, value=canonical_value(mech, r["value"], canon),
            klass=mechanism_class(mech), log_speedup=float(r["log_speedup"]),
            noise_floor=float(sigma) if isinstance(sigma, (int, float)) else None, conditioning={}, tier="legacy",
            knob=r["knob"], raw_value=r["value"], mem_delta_gib=r["mem_delta_gib"], created_at=created or now))


def _pg_upgrade() -> None:
    for table in OWNED:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({SEES_ALL} OR {VISIBLE})")
        op.execute(f"CREATE POLICY {table}_write ON {table} FOR ALL USING ({SEES_ALL}) WITH CHECK ({SEES_ALL})")


def _pg_downgrade() -> None:
    for table in OWNED:
        op.execute(f"DROP POLICY IF EXISTS {table}_read ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_write ON {table}")


def upgrade() -> None:
    _create_tables()
    _migrate_rows()
    if op.get_bind().dialect.name == "postgresql":
        _pg_upgrade()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _pg_downgrade()
    op.drop_table("exp_effects")
    op.drop_table("exp_observations")
    op.drop_table("exp_environments")
