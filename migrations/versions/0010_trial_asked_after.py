"""trials record how many search trials had been told when they were asked (issue 15)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

``trials.asked_after`` (integer, nullable): for a search trial, the number of ingested search trials the search
controller had been told when it proposed this one.  The controller is rebuilt by replaying the told trials on
every tick, and with several trials in flight a trial asked before the last improvement was told never saw the
incumbent it then failed to beat; escape mode does not count it as a stall (``stall_blind``,
``controller/search/controller.py``).  Replay needs the number to decide exactly as the live controller did.
Existing rows (and reference or promotion trials) keep NULL: such a trial counts as asked after every tell
before its own, which is how every trial was counted before this revision.  Downgrade drops the column.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as b:
        b.add_column(sa.Column("asked_after", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as b:
        b.drop_column("asked_after")
