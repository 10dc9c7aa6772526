"""``infrarsi finops`` as the read-only finance role: it reads the views only (no alembic_version, no table)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import create_engine, text

from infrarsi.controller.store import open_store
from tests.campaign.helpers import cli_env, infrarsi

SQL = Path(__file__).resolve().parents[2] / "deploy" / "finops-role.sql"
PASSWORD = "Fin4nce-" + uuid.uuid4().hex  # never printed, whatever fails

pytestmark = pytest.mark.postgres


@pytest.fixture
def finance_role(pg_url: str) -> Iterator[str]:
    """A login role made by deploy/finops-role.sql on a migrated database holding one campaign."""
    if shutil.which("psql") is None:
        pytest.skip("psql not installed")
    store = open_store(pg_url, auto_upgrade=True)
    store.create_campaign(name="c1", owner="alice", contract_path="/c", contract_yaml="y", contract_digest="d",
                          repo_path="/r", workdir="/w", executor="slurm", partition="gpu", budget_gpu_hours=2.0,
                          budget_trials=3, seed=0)
    store.engine.dispose()
    role = f"finops_{uuid.uuid4().hex[:8]}"
    libpq = pg_url.replace("postgresql+psycopg://", "postgresql://")
    subprocess.run(["psql", libpq, "-v", "ON_ERROR_STOP=1", "-v", f"role={role}", "-v", f"password='{PASSWORD}'",
                    "-q", "-f", str(SQL)], check=True, capture_output=True, text=True)
    try:
        yield role
    finally:
        admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"), {"r": role})
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()


def test_finops_as_the_finance_role(tmp_path: Path, pg_url: str, finance_role: str) -> None:
    url = pg_url.replace("postgres@", f"{finance_role}:{PASSWORD}@")
    # the role really cannot read the revision table (what the old code needed)
    eng = create_engine(url)
    with eng.connect() as conn, pytest.raises(Exception, match="permission denied"):
        conn.execute(text("SELECT * FROM alembic_version")).all()
    eng.dispose()

    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=url)
    out = infrarsi("finops", "campaign_cost", "--format", "json", env=env)
    (row,) = json.loads(out.stdout)
    assert (row["campaign"], row["owner"], row["budget_gpu_hours"]) == ("c1", "alice", 2.0)
    assert json.loads(infrarsi("finops", "failed", "--format", "json", env=env).stdout) == []
    assert PASSWORD not in out.stdout + out.stderr

    # a verb that needs tables is refused in one line, and the password stays hidden
    denied = infrarsi("campaign", "list", env=env, check=False)
    assert denied.returncode != 0 and denied.stderr.count("\n") == 1, denied.stderr
    assert "Traceback" not in denied.stderr and PASSWORD not in denied.stderr + denied.stdout


def test_finops_one_line_errors(tmp_path: Path, pg_url: str) -> None:
    # views missing: the database was never migrated
    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=pg_url)
    out = infrarsi("finops", env=env, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "finops_campaign_cost is missing" in out.stderr and "infrarsi db upgrade" in out.stderr
    # unreachable server, password in the URL and in the query string
    for bad in (f"postgresql://fin:{PASSWORD}@127.0.0.1:1/x", f"postgresql://fin@127.0.0.1:1/x?password={PASSWORD}"):
        out = infrarsi("finops", "--url", bad, env=env, check=False)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "127.0.0.1:1" in out.stderr and PASSWORD not in out.stderr + out.stdout
