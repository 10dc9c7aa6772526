"""The finance role created by deploy/finops-role.sql reads the views and nothing else."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError, InternalError

from infrarsi.controller.store import open_store

SQL = Path(__file__).resolve().parents[2] / "deploy" / "finops-role.sql"


@pytest.mark.postgres
@pytest.mark.skipif(shutil.which("psql") is None, reason="psql not installed")
def test_finops_role_is_read_only_on_views(pg_url: str) -> None:
    store = open_store(pg_url, auto_upgrade=True)
    store.create_campaign(name="c", owner="o", contract_path="/c", contract_yaml="y", contract_digest="d",
                          repo_path="/r", workdir="/w", executor="slurm", partition="gpu", budget_gpu_hours=1.0,
                          budget_trials=1, seed=0)
    role = f"finops_{uuid.uuid4().hex[:8]}"
    libpq = pg_url.replace("postgresql+psycopg://", "postgresql://")
    for _ in range(2):  # idempotent
        subprocess.run(["psql", libpq, "-v", "ON_ERROR_STOP=1", "-v", f"role={role}", "-q", "-f", str(SQL)],
                       check=True, capture_output=True, text=True)
    finance = create_engine(pg_url.replace("postgres@", f"{role}@"))
    try:
        with finance.connect() as conn:
            rows = conn.execute(text("SELECT campaign, gpu_hours FROM finops_campaign_cost")).all()
            assert [r[0] for r in rows] == ["c"]
            conn.execute(text("SELECT * FROM finops_failed_gpu_hours")).all()
            conn.execute(text("SELECT * FROM finops_cost_per_verified_pct")).all()
        with finance.connect() as conn:
            with pytest.raises((ProgrammingError, InternalError), match="permission denied"):
                conn.execute(text("SELECT * FROM trials")).all()
        with finance.connect() as conn:
            with pytest.raises((ProgrammingError, InternalError)):
                conn.execute(text("INSERT INTO events (kind, created_at) VALUES ('x', now())"))
    finally:
        finance.dispose()
        admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()
