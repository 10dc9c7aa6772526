"""finops views for finance, and an append-only guard on the event log

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Views (documented in docs/finops.md; finance queries them directly):
- finops_failed_gpu_hours: failed-trial GPU-hours by campaign, user, partition, stage and failure class.
- finops_campaign_cost: total cost per campaign, failed and rejected trials included.
- finops_cost_per_verified_pct: GPU-hours per verified percent of speedup.
"""
from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

VIEWS = {
    "finops_failed_gpu_hours": """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner,
               COALESCE(l.partition, c.partition, '') AS partition, l.stage AS stage,
               l.failure_class AS failure_class, COUNT(*) AS trials,
               SUM(l.gpu_seconds) / 3600.0 AS gpu_hours
        FROM cost_ledger l JOIN campaigns c ON c.id = l.campaign_id
        WHERE l.failure_class IS NOT NULL
        GROUP BY c.id, c.name, c.owner, COALESCE(l.partition, c.partition, ''), l.stage, l.failure_class
    """,
    "finops_campaign_cost": """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner, c.state AS state,
               COUNT(l.id) AS entries,
               COALESCE(SUM(l.gpu_seconds), 0) / 3600.0 AS gpu_hours,
               COALESCE(SUM(CASE WHEN l.failure_class IS NOT NULL AND l.failure_class <> 'rejected'
                                 THEN l.gpu_seconds END), 0) / 3600.0 AS failed_gpu_hours,
               COALESCE(SUM(CASE WHEN l.failure_class = 'rejected' THEN l.gpu_seconds END), 0) / 3600.0
                   AS rejected_gpu_hours,
               COALESCE(SUM(l.llm_tokens), 0) AS llm_tokens,
               c.budget_gpu_hours AS budget_gpu_hours
        FROM campaigns c LEFT JOIN cost_ledger l ON l.campaign_id = c.id
        GROUP BY c.id, c.name, c.owner, c.state, c.budget_gpu_hours
    """,
    "finops_cost_per_verified_pct": """
        SELECT v.campaign_id AS campaign_id, v.campaign AS campaign, v.owner AS owner, v.gpu_hours AS gpu_hours,
               c.delivered_speedup AS delivered_speedup,
               (c.delivered_speedup - 1.0) * 100.0 AS verified_pct,
               CASE WHEN c.delivered_speedup > 1.0
                    THEN v.gpu_hours / ((c.delivered_speedup - 1.0) * 100.0) END AS gpu_hours_per_pct
        FROM finops_campaign_cost v JOIN campaigns c ON c.id = v.campaign_id
    """,
}


def upgrade() -> None:
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION infrarsi_events_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'events is append-only'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
            "FOR EACH ROW EXECUTE FUNCTION infrarsi_events_append_only()"
        )
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events "
                "BEGIN SELECT RAISE(ABORT, 'events is append-only'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS events_append_only ON events")
        op.execute("DROP FUNCTION IF EXISTS infrarsi_events_append_only()")
    else:
        op.execute("DROP TRIGGER IF EXISTS events_no_update")
        op.execute("DROP TRIGGER IF EXISTS events_no_delete")
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
