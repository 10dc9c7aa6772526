"""proposer ledger (issue 12): one row per proposer request, and finance views of language-model cost

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

- ``proposer_requests``: one row per request to a proposer (``controller/proposers/``): which proposer (name,
  kind, model), what was asked (``request``: priors, patches, complete) at which ``stage``, tokens in and out,
  money (``usd``, NULL when no price is configured), wall time, ``outcome`` (ok/failed) with a one-line
  ``reason``, the prompt's SHA-256 digest and how many priors and patches survived validation.  Indexed by
  campaign.  The store also books the tokens as a ``cost_ledger`` row (``llm_tokens``), so
  ``finops_campaign_cost.llm_tokens`` counts them.
- Views (finance reads them; ``deploy/finops-role.sql`` grants them):
  ``finops_llm_cost``: per campaign, GPU-hours next to language-model requests, failed requests, tokens in/out,
  USD and proposer wall-hours; ``finops_proposer_cost``: the same per (campaign, proposer, kind, model).
  They read ``cost_ledger`` and ``proposer_requests`` but no other finops view.

PostgreSQL: row-level security as 0004 gives ``cost_ledger`` (read when the campaign is visible or the role sees
all; writes for roles that see all).  Grants: ``deploy/roles.sql``.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

SEES_ALL = "(SELECT infrarsi_sees_all(current_user))"
THROUGH = "EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)"

_LLM = """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner, c.state AS state,
               COALESCE(g.gpu_hours, 0) AS gpu_hours,
               COALESCE(p.requests, 0) AS llm_requests,
               COALESCE(p.failed, 0) AS llm_failed_requests,
               COALESCE(p.tokens_in, 0) AS llm_tokens_in,
               COALESCE(p.tokens_out, 0) AS llm_tokens_out,
               p.usd AS llm_usd,
               COALESCE(p.wall_s, 0) / 3600.0 AS proposer_wall_hours
        FROM campaigns c
        LEFT JOIN (SELECT campaign_id, SUM(gpu_seconds) / 3600.0 AS gpu_hours
                   FROM cost_ledger GROUP BY campaign_id) g ON g.campaign_id = c.id
        LEFT JOIN (SELECT campaign_id, COUNT(*) AS requests,
                          SUM(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END) AS failed,
                          SUM(tokens_in) AS tokens_in, SUM(tokens_out) AS tokens_out,
                          SUM(usd) AS usd, SUM(wall_s) AS wall_s
                   FROM proposer_requests GROUP BY campaign_id) p ON p.campaign_id = c.id
"""
_PER_PROPOSER = """
        SELECT c.id AS campaign_id, c.name AS campaign, c.owner AS owner,
               r.proposer AS proposer, r.kind AS kind, r.model AS model,
               COUNT(*) AS requests,
               SUM(CASE WHEN r.outcome <> 'ok' THEN 1 ELSE 0 END) AS failed_requests,
               SUM(r.tokens_in) AS tokens_in, SUM(r.tokens_out) AS tokens_out,
               SUM(r.usd) AS usd, SUM(r.wall_s) / 3600.0 AS wall_hours,
               SUM(r.n_patches) AS patches, SUM(r.n_priors) AS priors
        FROM proposer_requests r JOIN campaigns c ON c.id = r.campaign_id
        GROUP BY c.id, c.name, c.owner, r.proposer, r.kind, r.model
"""
VIEWS = {"finops_llm_cost": _LLM, "finops_proposer_cost": _PER_PROPOSER}


def upgrade() -> None:
    op.create_table(
        "proposer_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=20), nullable=False),
        sa.Column("proposer", sa.String(length=60), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("request", sa.String(length=20), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("usd", sa.Float(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("prompt_digest", sa.String(length=64), nullable=False),
        sa.Column("n_priors", sa.Integer(), nullable=False),
        sa.Column("n_patches", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_proposer_requests_campaign", "proposer_requests", ["campaign_id"])
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE proposer_requests ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY proposer_requests_read ON proposer_requests FOR SELECT "
                   f"USING ({SEES_ALL} OR {THROUGH})")
        op.execute(f"CREATE POLICY proposer_requests_write ON proposer_requests FOR ALL "
                   f"USING ({SEES_ALL}) WITH CHECK ({SEES_ALL})")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP POLICY IF EXISTS proposer_requests_read ON proposer_requests")
        op.execute("DROP POLICY IF EXISTS proposer_requests_write ON proposer_requests")
    op.drop_index("ix_proposer_requests_campaign", table_name="proposer_requests")
    op.drop_table("proposer_requests")
