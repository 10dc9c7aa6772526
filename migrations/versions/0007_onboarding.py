"""onboarding (issue 16): accounting and inputs

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

Placeholder reserved so parallel work keeps one linear chain; it changes nothing until filled in.
"""
from __future__ import annotations

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
