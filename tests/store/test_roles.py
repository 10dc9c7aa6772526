"""Roles and row-level security on real PostgreSQL (migration 0004 + deploy/roles.sql), and the stored 0003 upgrade.

Each test gets a fresh database and its own login roles (unique names), made with ``deploy/roles.sql -v login=...``
exactly as an admin would; the group roles are cluster-wide and shared (the script is idempotent).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import create_engine, inspect, text

from infrarsi.controller.errors import StoreError
from infrarsi.controller.store import migrate, open_store
from infrarsi.controller.store.lease import grant_sql
from infrarsi.controller.store.sql import PermissionDeniedError, SqlStore

ROOT = Path(__file__).resolve().parents[2]
ROLES_SQL = ROOT / "deploy" / "roles.sql"
DATA = Path(__file__).parent / "data"
PERSONS = {"alice": "researcher", "bob": "researcher", "carol": "admin", "fin": "finance", "daemon": "daemon"}

pytestmark = pytest.mark.skipif(shutil.which("psql") is None, reason="psql not installed")


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def run_roles_sql(url: str, *variables: str) -> subprocess.CompletedProcess:
    args = ["psql", libpq(url), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(ROLES_SQL)]
    for v in variables:
        args[1:1] = ["-v", v]
    return subprocess.run(args, capture_output=True, text=True)


@dataclass
class RolesDb:
    """A migrated database with deploy/roles.sql applied and one login role per PERSONS entry."""

    url: str
    names: dict[str, str]

    def url_as(self, person: str) -> str:
        return self.url.replace("postgres@", f"{self.names[person]}@", 1)

    def store(self, person: str) -> SqlStore:
        return SqlStore(self.url_as(person))

    def psql(self, person: str, sql: str, unix_user: str | None = None) -> subprocess.CompletedProcess:
        """Run ``sql`` with psql as ``person`` (``-U``), or as the Unix user ``unix_user`` (runuser; psql then
        takes the role name from the OS user, as with peer authentication)."""
        dbname = self.url.rsplit("/", 1)[1]
        if unix_user is None:
            cmd = ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", self.names[person],
                   "-d", dbname, "-c", sql]
        else:
            cmd = ["runuser", "-u", unix_user, "--", "psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                   "-d", dbname, "-c", sql]
        return subprocess.run(cmd, capture_output=True, text=True, cwd="/")


def make_roles_db(url: str, prefix: str = "irsi") -> RolesDb:
    migrate.upgrade(url)
    tag = uuid.uuid4().hex[:6]
    names = {p: f"{prefix}_{p}_{tag}" for p in PERSONS}
    for _ in range(2):  # idempotent
        out = run_roles_sql(url)
        assert out.returncode == 0, out.stderr
    for person, group in PERSONS.items():
        out = run_roles_sql(url, f"login={names[person]}", f"grant={group}")
        assert out.returncode == 0, out.stderr
    return RolesDb(url, names)


def drop_roles(db: RolesDb) -> None:
    admin = create_engine(db.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE usename = ANY(:n) AND pid <> pg_backend_pid()"), {"n": list(db.names.values())})
        for name in db.names.values():
            conn.execute(text(f'DROP OWNED BY "{name}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
    admin.dispose()


@pytest.fixture
def roles_db(pg_url: str) -> Iterator[RolesDb]:
    db = make_roles_db(pg_url)
    try:
        yield db
    finally:
        drop_roles(db)


CAMPAIGN = dict(name="c", contract_path="/c", contract_yaml="y", contract_digest="d", repo_path="/r", workdir="/w",
                executor="slurm", partition="gpu", budget_gpu_hours=1.0, budget_trials=1, seed=0)


@pytest.mark.postgres
def test_researchers_see_and_cancel_only_their_own(roles_db: RolesDb) -> None:
    alice, bob, carol = roles_db.store("alice"), roles_db.store("bob"), roles_db.store("carol")
    mine = alice.create_campaign(owner=roles_db.names["bob"], **CAMPAIGN)  # a forged owner is replaced
    assert mine.owner == roles_db.names["alice"] == alice.identity()
    theirs = bob.create_campaign(**CAMPAIGN)
    assert theirs.owner == roles_db.names["bob"]
    daemon = roles_db.store("daemon")
    trial = daemon.add_trial_intent(mine.id, "k1", "search", {}, [], "sig", "local", "/o", 0, None)

    assert [c.id for c in alice.list_campaigns()] == [mine.id]
    assert {c.id for c in carol.list_campaigns()} == {mine.id, theirs.id}
    with pytest.raises(KeyError):
        bob.get_campaign(mine.id)
    assert bob.list_trials(mine.id) == [] and bob.live_trials() == [] and bob.events(mine.id) == []
    assert [t.id for t in alice.list_trials(mine.id)] == [trial.id]
    with pytest.raises(KeyError, match=f"no campaign {mine.id}"):
        bob.cancel_campaign(mine.id)
    with pytest.raises(PermissionDeniedError, match="permission denied for table campaigns"):
        alice.update_campaign(mine.id, delivered_speedup=42.0)
    with pytest.raises(PermissionDeniedError, match="permission denied for table trials"):
        alice.mark_finished(trial.id, "ok", "forged", None, None)
    with pytest.raises(PermissionDeniedError, match="workloads"):
        alice.register_workload("w", "x", "y", "d", None, 1)
    assert alice.get_campaign(mine.id).state == "init"

    assert alice.cancel_campaign(mine.id).state == "cancelled"
    assert alice.cancel_campaign(mine.id).state == "cancelled"  # a no-op on a terminal campaign
    assert carol.cancel_campaign(theirs.id).state == "cancelled"  # an admin cancels anyone's
    assert carol.register_workload("w", carol.identity(), "y", "d", "gpu", 1).owner == roles_db.names["carol"]
    # a cancel is final: a daemon that computed a transition before it committed does not revive the campaign
    assert daemon.update_campaign(mine.id, state="run").state == "cancelled"
    who = [(e.actor, e.kind, e.campaign_id) for e in carol.audit(kinds=["campaign.created", "campaign.state"])]
    assert who == [(roles_db.names["alice"], "campaign.created", mine.id),
                   (roles_db.names["bob"], "campaign.created", theirs.id),
                   (roles_db.names["alice"], "campaign.state", mine.id),
                   (roles_db.names["carol"], "campaign.state", theirs.id)]
    assert {e.campaign_id for e in bob.audit()} == {theirs.id}
    for s in (alice, bob, carol, daemon):
        s.engine.dispose()


@pytest.mark.postgres
def test_psql_can_do_no_more_than_the_cli(roles_db: RolesDb) -> None:
    alice = roles_db.store("alice")
    cid = alice.create_campaign(**CAMPAIGN).id
    roles_db.store("daemon").add_trial_intent(cid, "k1", "search", {}, [], "sig", "local", "/o", 0, None)
    alice.engine.dispose()
    refused = {
        "UPDATE campaigns SET state = 'cancelled' WHERE owner <> current_user": "permission denied",
        f"UPDATE campaigns SET delivered_speedup = 42 WHERE id = {cid}": "permission denied",
        f"DELETE FROM campaigns WHERE id = {cid}": "permission denied",
        f"SELECT infrarsi_cancel_campaign({cid})": f"no campaign {cid}",
        "SELECT * FROM campaigns FOR UPDATE": "permission denied",
        "BEGIN; LOCK TABLE leader_lease; COMMIT": "permission denied",
        "UPDATE events SET kind = 'x'": "permission denied",
        "INSERT INTO cost_ledger (campaign_id, stage, gpu_seconds, llm_tokens, created_at) "
        f"VALUES ({cid}, 'search', -1e9, 0, now())": "permission denied",
    }
    for sql, why in refused.items():
        out = roles_db.psql("bob", sql)
        assert out.returncode != 0 and why in out.stderr, (sql, out.stdout, out.stderr)
    assert roles_db.psql("bob", "SELECT count(*) FROM campaigns").stdout.strip() == "0"
    assert roles_db.psql("bob", "SELECT count(*) FROM trials").stdout.strip() == "0"
    assert roles_db.psql("bob", "SELECT count(*) FROM events").stdout.strip() == "0"
    # the owner's own psql: sees its rows, still cannot rewrite them; the narrow path works
    assert roles_db.psql("alice", "SELECT count(*) FROM trials").stdout.strip() == "1"
    out = roles_db.psql("alice", f"UPDATE campaigns SET delivered_speedup = 42 WHERE id = {cid}")
    assert out.returncode != 0 and "permission denied" in out.stderr
    assert roles_db.psql("alice", f"SELECT infrarsi_cancel_campaign({cid})").stdout.strip() == "cancelled"
    # the actor of an event cannot be forged: the trigger writes session_user
    roles_db.psql("alice", f"INSERT INTO events (campaign_id, kind, actor, created_at) VALUES ({cid}, 'x', 'bob', now())")
    assert roles_db.psql("carol", "SELECT actor FROM events WHERE kind = 'x'").stdout.strip() == roles_db.names["alice"]


@pytest.mark.postgres
def test_finance_reads_views_and_can_stall_nothing(roles_db: RolesDb) -> None:
    alice = roles_db.store("alice")
    alice.create_campaign(**CAMPAIGN)
    alice.engine.dispose()
    assert roles_db.psql("fin", "SELECT count(*) FROM finops_campaign_cost").stdout.strip() == "1"
    for sql in ("SELECT * FROM campaigns", "SELECT * FROM leader_lease FOR SHARE", "LOCK TABLE campaigns",
                "SELECT infrarsi_cancel_campaign(1)", "SELECT * FROM events"):
        out = roles_db.psql("fin", f"BEGIN READ WRITE; {sql}; COMMIT")  # not merely its read-only default
        assert out.returncode != 0 and "permission denied" in out.stderr, (sql, out.stderr)


@pytest.mark.postgres
def test_daemon_role_runs_everything_with_the_lease(roles_db: RolesDb) -> None:
    assert grant_sql("infrarsi_daemon") in ROLES_SQL.read_text()
    cid = roles_db.store("alice").create_campaign(**CAMPAIGN).id
    daemon = roles_db.store("daemon")
    assert daemon.sees_all()
    lease = daemon.lease(lease_s=30)
    assert lease.acquire() and lease.token == 1
    daemon.set_fence(lease)
    t = daemon.add_trial_intent(cid, "k1", "search", {}, [], "sig", "local", "/o", 0, None)
    daemon.mark_submitted(t.id, "123", 1.0)
    daemon.mark_finished(t.id, "cancelled", "stopped", None, None)
    assert daemon.update_campaign(cid, state="doctor").state == "doctor"
    # nobody else can take or hold the lease row
    out = roles_db.psql("carol", "UPDATE leader_lease SET token = token + 1")
    assert out.returncode != 0 and "permission denied" in out.stderr
    lease.release()
    daemon.engine.dispose()


@pytest.mark.postgres
def test_roles_sql_refuses_an_unknown_group(roles_db: RolesDb) -> None:
    out = run_roles_sql(roles_db.url, "login=irsi_nobody_x", "grant=superuser")
    assert out.returncode != 0 and "grant must be researcher, admin, finance or daemon, not superuser" in out.stderr
    assert roles_db.psql("carol", "SELECT count(*) FROM pg_roles WHERE rolname = 'irsi_nobody_x'").stdout.strip() == "0"


def test_upgrade_from_stored_0003_adds_actors(tmp_path: Path) -> None:
    """A database stored at 0003 upgrades with its rows intact; old events have no actor, new ones the OS user."""
    from infrarsi.controller.settings import os_user

    db = tmp_path / "old3.sqlite"
    shutil.copy(DATA / "v0003.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0003"
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    c = store.get_campaign(1)
    assert (c.name, c.owner, c.state, c.delivered_speedup) == ("old", "bob", "done", 1.5)
    notes = store.audit(kinds=["campaign.note"])
    assert [(e.actor, e.payload) for e in notes] == [(None, {"v": 2}), (None, {"note": "stored at 0003"})]
    assert store.cancel_campaign(1).state == "done"  # terminal: nothing changes, nothing is logged
    assert store.audit(kinds=["campaign.state"]) == []
    store.add_event("campaign.note", {"note": "after 0004"}, campaign_id=1)
    assert store.audit(kinds=["campaign.note"])[-1].actor == os_user()
    assert store.lease_info().token == 3
    (cost,) = store.finops("campaign_cost")
    assert cost["gpu_hours"] == pytest.approx(1.75)
    migrate.downgrade(url, "0003")  # and back: the column goes, the rows and the append-only guard stay
    assert "actor" not in {col["name"] for col in inspect(create_engine(url)).get_columns("events")}
    with pytest.raises(Exception, match="append-only"):
        with create_engine(url).begin() as conn:
            conn.execute(text("DELETE FROM events"))


@pytest.mark.postgres
def test_unknown_database_role_is_one_line(pg_url: str) -> None:
    migrate.upgrade(pg_url)
    with pytest.raises(StoreError) as info:
        open_store(pg_url.replace("postgres@", "irsi_nobody_at_all@"))
    assert "\n" not in str(info.value)
