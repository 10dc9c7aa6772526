"""Shared fixtures: a real PostgreSQL database per test session, SQLite URLs, an isolated INFRARSI_HOME."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

PG_ADMIN = os.environ.get("INFRARSI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REPO_ROOT = Path(__file__).resolve().parents[1]


def _pg_ready() -> bool:
    return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0


def ensure_postgres() -> None:
    """Start the local PostgreSQL cluster when it is down (tests must not assume it runs)."""
    if _pg_ready():
        return
    subprocess.run(["bash", str(REPO_ROOT / "deploy" / "pg-up.sh")], check=False)
    if not _pg_ready():
        pytest.skip("PostgreSQL is not available on 127.0.0.1:5432")


@pytest.fixture(scope="session")
def pg_server() -> str:
    ensure_postgres()
    return PG_ADMIN


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    from sqlalchemy import create_engine, text

    name = f"infrarsi_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = pg_server.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n AND pid <> pg_backend_pid()"
            ), {"n": name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'infrarsi.sqlite'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs on SQLite and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'infrarsi.sqlite'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def infrarsi_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated INFRARSI_HOME (SQLite store, scratch, signing key) for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("INFRARSI_HOME", str(home))
    monkeypatch.delenv("INFRARSI_DATABASE_URL", raising=False)
    monkeypatch.delenv("INFRARSI_SCRATCH", raising=False)
    monkeypatch.delenv("INFRARSI_KEY_FILE", raising=False)
    return home


@pytest.fixture
def toy_repo(tmp_path: Path) -> Path:
    """The toy workload (tests/campaign/toy) copied into its own git repository."""
    from tests.campaign.helpers import TOY, git_repo

    return git_repo(TOY, tmp_path / "toy")
