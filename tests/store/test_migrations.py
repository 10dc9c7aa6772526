"""Alembic migrations on SQLite and PostgreSQL: empty -> head -> base, and upgrades from stored databases of earlier
revisions (0001, 0002, 0009; the experience revisions in test_experience_migration.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from infrarsi.controller.store import migrate, open_store
from infrarsi.controller.store.models import Base
from infrarsi.controller.errors import StoreError

DATA = Path(__file__).parent / "data"


def test_upgrade_downgrade_roundtrip(any_url: str) -> None:
    migrate.upgrade(any_url)
    assert migrate.current_revision(any_url) == migrate.head_revision()
    insp = inspect(create_engine(any_url))
    tables = set(insp.get_table_names())
    assert set(Base.metadata.tables) <= tables
    views = set(insp.get_view_names())
    assert {"finops_failed_gpu_hours", "finops_campaign_cost", "finops_cost_per_verified_pct"} <= views
    migrate.downgrade(any_url, "base")
    assert migrate.current_revision(any_url) is None
    insp = inspect(create_engine(any_url))
    assert not (set(Base.metadata.tables) & set(insp.get_table_names()))
    migrate.upgrade(any_url)
    assert migrate.current_revision(any_url) == migrate.head_revision()


def test_models_match_head_schema(any_url: str) -> None:
    """The ORM and the migrations agree: Alembic's autogenerate finds nothing to change at head."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    migrate.upgrade(any_url)
    with create_engine(any_url).connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diffs == []


def test_upgrade_from_stored_previous_version(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(DATA / "v0001.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0001"
    store = open_store(url)  # embedded SQLite upgrades itself
    assert migrate.current_revision(url) == migrate.head_revision()
    c = store.get_campaign(1)
    assert c.name == "old" and c.delivered_speedup == 1.5
    rows = {(r["stage"], r["failure_class"]): r["gpu_hours"] for r in store.finops("failed")}
    assert rows == {("search", "oom"): 0.5, ("promotion", "rejected"): 0.25}
    (cost,) = store.finops("campaign_cost")
    assert cost["gpu_hours"] == pytest.approx(1.75)


@pytest.mark.postgres
def test_postgres_behind_head_is_refused(pg_url: str) -> None:
    migrate.upgrade(pg_url, "0001")
    with pytest.raises(StoreError, match="run 'infrarsi db upgrade'"):
        open_store(pg_url)


def test_unreachable_database_is_one_line() -> None:
    with pytest.raises(StoreError) as info:
        open_store("postgresql+psycopg://postgres@127.0.0.1:1/nope")
    assert "\n" not in str(info.value) and "127.0.0.1:1" in str(info.value)


def test_events_are_append_only(any_url: str) -> None:
    store = open_store(any_url, auto_upgrade=True)
    store.add_event("x", {"a": 1})
    with pytest.raises(Exception, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE events SET kind = 'y'"))
    with pytest.raises(Exception, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM events"))


def test_upgrade_from_stored_0002_adds_the_lease(tmp_path: Path) -> None:
    """A database stored at 0002 (before the leader lease) upgrades with its rows intact and a working lease."""
    db = tmp_path / "old2.sqlite"
    shutil.copy(DATA / "v0002.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0002"
    assert "leader_lease" not in inspect(create_engine(url)).get_table_names()
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    c = store.get_campaign(1)
    assert c.name == "old" and c.delivered_speedup == 1.5
    assert [e["kind"] for e in store.events(1)] == ["campaign.note"]
    (cost,) = store.finops("campaign_cost")
    assert cost["gpu_hours"] == pytest.approx(1.75)
    assert store.lease_info() is None
    lease = store.lease(lease_s=30)
    assert lease.acquire() and lease.token == 1
    migrate.downgrade(url, "0002")  # and back: the lease table goes, the rows stay
    assert "leader_lease" not in inspect(create_engine(url)).get_table_names()
    assert migrate.current_revision(url) == "0002"


def test_upgrade_from_stored_0009_adds_trial_asked_after(tmp_path: Path) -> None:
    """Revision 0010 from tests/store/data/v0009.sqlite (campaign 'gpt-v9': an ingested reference, an ingested
    search trial, one still submitted): every trial survives with asked_after None (counted as before), a new
    trial stores it, and the downgrade drops only the column."""
    db = tmp_path / "old9.sqlite"
    shutil.copy(DATA / "v0009.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0009"
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    (c,) = store.list_campaigns()
    old = store.list_trials(c.id)
    assert [(t.trial_key, t.stage, t.status) for t in old] == [
        ("ref1", "reference", "ingested"), ("s1", "search", "ingested"), ("s2", "search", "submitted")]
    assert all(t.asked_after is None for t in old)
    new = store.add_trial_intent(c.id, "s3", "search", {"mb": 2}, [], "sig-s3", "slurm", "/o/s3", 1, "gpu",
                                 asked_after=1)
    assert new.seq == 4 and store.list_trials(c.id)[-1].asked_after == 1
    migrate.downgrade(url, "0009")
    cols = {col["name"] for col in inspect(create_engine(url)).get_columns("trials")}
    assert "asked_after" not in cols and "outdir" in cols
    with create_engine(url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == 4
