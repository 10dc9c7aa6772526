"""leader lease with a fencing token (replaces the PostgreSQL session advisory lock)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

One row per lease name (the daemon uses ``daemon``).  ``holder`` is the daemon instance that holds it, ``expires_at``
is the database clock (unix seconds) after which anyone may take it, and ``token`` only ever increases: every write
transaction of the leader compares its token with this row and is refused when a newer token exists (fencing).
Grants: none are given here; ``infrarsi.controller.store.lease.grant_sql`` renders the GRANT for the daemon role
(finance must not get UPDATE on this table).
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("token", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("expires_at", sa.Float(), nullable=False, server_default="0"),
        sa.Column("renewed_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_leader_lease"),
    )


def downgrade() -> None:
    op.drop_table("leader_lease")
