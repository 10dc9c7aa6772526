"""experience observations carry "needs a partner" crash explanations (issue 13)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

``exp_observations.requirements`` (JSON, not null): per crashed observation, the failure ledger's requirements the
crash is explained by, ``[[[mechanism, value], [partner mechanism, partner value]], ...]`` ("this setting crashed
because its partner was missing"; ``controller/search/failures.py``).  Before this revision such a crash was
written with no explanation at all (the ledger keeps a requirement in place of a conflict tuple).  Existing rows
get ``[]``: nothing was recorded for them, and their ``conflicts`` are unchanged.  Downgrade drops the column.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("exp_observations") as b:
        b.add_column(sa.Column("requirements", sa.JSON(), nullable=True))
    op.execute(sa.text("UPDATE exp_observations SET requirements = '[]'"))
    with op.batch_alter_table("exp_observations") as b:
        b.alter_column("requirements", existing_type=sa.JSON(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("exp_observations") as b:
        b.drop_column("requirements")
