"""onboarding (issue 16): accounting and inputs

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

- ``campaigns.sbatch_json``: the sbatch-style options a campaign was submitted with (``infrarsi submit -p/-A/--qos/
  -t/--gres/-N/--constraint/--exclusive/--mail-user/--mail-type``, or their ``INFRARSI_*`` environment defaults),
  applied to every trial job of the campaign (``controller/campaign/sbatch_options.py``).  NULL: none.
- ``cost_ledger.cpu_seconds``: CPU trials (no GPU: ``gpus_per_node: 0``) are booked as CPU-seconds (one slot per
  trial) and no longer as GPU-seconds; GPU trials keep ``gpu_seconds``.  Existing rows keep what they had.
- The finops views gain a ``cpu_hours`` column (last, so PostgreSQL keeps the views' grants:
  ``CREATE OR REPLACE VIEW`` may only append columns); every existing column is unchanged.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_FAILED = """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner,
               COALESCE(l.partition, c.partition, '') AS partition, l.stage AS stage,
               l.failure_class AS failure_class, COUNT(*) AS trials,
               SUM(l.gpu_seconds) / 3600.0 AS gpu_hours{cpu}
        FROM cost_ledger l JOIN campaigns c ON c.id = l.campaign_id
        WHERE l.failure_class IS NOT NULL
        GROUP BY c.id, c.name, c.owner, COALESCE(l.partition, c.partition, ''), l.stage, l.failure_class
"""
_COST = """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner, c.state AS state,
               COUNT(l.id) AS entries,
               COALESCE(SUM(l.gpu_seconds), 0) / 3600.0 AS gpu_hours,
               COALESCE(SUM(CASE WHEN l.failure_class IS NOT NULL AND l.failure_class <> 'rejected'
                                 THEN l.gpu_seconds END), 0) / 3600.0 AS failed_gpu_hours,
               COALESCE(SUM(CASE WHEN l.failure_class = 'rejected' THEN l.gpu_seconds END), 0) / 3600.0
                   AS rejected_gpu_hours,
               COALESCE(SUM(l.llm_tokens), 0) AS llm_tokens,
               c.budget_gpu_hours AS budget_gpu_hours{cpu}
        FROM campaigns c LEFT JOIN cost_ledger l ON l.campaign_id = c.id
        GROUP BY c.id, c.name, c.owner, c.state, c.budget_gpu_hours
"""
_PER_PCT = """
        SELECT v.campaign_id AS campaign_id, v.campaign AS campaign, v.owner AS owner, v.gpu_hours AS gpu_hours,
               c.delivered_speedup AS delivered_speedup,
               (c.delivered_speedup - 1.0) * 100.0 AS verified_pct,
               CASE WHEN c.delivered_speedup > 1.0
                    THEN v.gpu_hours / ((c.delivered_speedup - 1.0) * 100.0) END AS gpu_hours_per_pct
        FROM finops_campaign_cost v JOIN campaigns c ON c.id = v.campaign_id
"""
_CPU_FAILED = ",\n               SUM(l.cpu_seconds) / 3600.0 AS cpu_hours"
_CPU_COST = ",\n               COALESCE(SUM(l.cpu_seconds), 0) / 3600.0 AS cpu_hours"


def _views(with_cpu: bool) -> dict[str, str]:
    return {"finops_failed_gpu_hours": _FAILED.format(cpu=_CPU_FAILED if with_cpu else ""),
            "finops_campaign_cost": _COST.format(cpu=_CPU_COST if with_cpu else "")}


def _drop_views() -> None:
    for name in ("finops_cost_per_verified_pct", "finops_campaign_cost", "finops_failed_gpu_hours"):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def _create_views(with_cpu: bool) -> None:
    for name, body in _views(with_cpu).items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    op.execute(f"CREATE VIEW finops_cost_per_verified_pct AS {_PER_PCT}")


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as b:
        b.add_column(sa.Column("sbatch_json", sa.JSON(), nullable=True))
    with op.batch_alter_table("cost_ledger") as b:
        b.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "postgresql":
        # appending a column keeps the views' grants (deploy/finops-role.sql) and the dependent view
        for name, body in _views(True).items():
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
    else:
        _drop_views()
        _create_views(True)


def _set_aside_other_sqlite_views() -> list[str]:
    """SQLite: drop every view not made here (e.g. 0006's finops_llm_cost) and return their SQL.  Batch mode
    rebuilds a table by renaming a copy, and SQLite then re-checks every view: one that reads the table being
    rebuilt fails the rename ("error in view ...: no such table")."""
    if op.get_bind().dialect.name != "sqlite":
        return []
    rows = op.get_bind().execute(sa.text(
        "SELECT name, sql FROM sqlite_master WHERE type = 'view' AND name NOT IN "
        "('finops_failed_gpu_hours', 'finops_campaign_cost', 'finops_cost_per_verified_pct') ORDER BY rowid")).all()
    for name, _sql in rows:
        op.execute(f'DROP VIEW IF EXISTS "{name}"')
    return [sql for _name, sql in rows]


def downgrade() -> None:
    # the views read cpu_seconds: drop them first, recreate them as 0002 made them (PostgreSQL: run
    # deploy/roles.sql again for finance's grants)
    others = _set_aside_other_sqlite_views()
    _drop_views()
    with op.batch_alter_table("cost_ledger") as b:
        b.drop_column("cpu_seconds")
    with op.batch_alter_table("campaigns") as b:
        b.drop_column("sbatch_json")
    _create_views(False)
    for sql in others:
        op.execute(sql)
