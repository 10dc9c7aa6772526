"""Who may do what, through the real CLI and psql on real PostgreSQL, with a second Unix user made by useradd.

The second person is a real Unix account whose psql connects without naming a role (the role is the OS user, as
with peer authentication).  The CLI is run for each person with their role in the URL: the test server trusts
127.0.0.1, so naming a role is enough to be it (docs/admin.md: use scram or peer in production).  The CLI itself
cannot run as the new Unix user here, because the test interpreter lives under /root (mode 0700).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tests.campaign.helpers import cli_env, infrarsi
from tests.store.test_roles import RolesDb, drop_roles, make_roles_db, run_roles_sql

pytestmark = pytest.mark.skipif(shutil.which("psql") is None or shutil.which("useradd") is None,
                                reason="needs psql and useradd")


@pytest.fixture
def unix_user() -> Iterator[str]:
    name = f"irsi_u{uuid.uuid4().hex[:8]}"
    out = subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"useradd failed: {out.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def people(pg_url: str, unix_user: str) -> Iterator[tuple[RolesDb, str]]:
    db = make_roles_db(pg_url)
    out = run_roles_sql(pg_url, f"login={unix_user}", "grant=researcher")
    assert out.returncode == 0, out.stderr
    db.names["eve"] = unix_user  # the Unix user's own role
    try:
        yield db, unix_user
    finally:
        drop_roles(db)


def _env(db: RolesDb, home: Path, person: str, **extra: str) -> dict[str, str]:
    return cli_env(home / person, INFRARSI_DATABASE_URL=db.url_as(person), **extra)


@pytest.mark.postgres
def test_second_unix_user_cannot_see_or_cancel_anothers_campaign(people: tuple[RolesDb, str], tmp_path: Path,
                                                                  toy_repo: Path) -> None:
    db, eve = people
    contract = str(toy_repo / "infrarsi.yaml")
    # alice submits; LOGNAME/USER claiming to be someone else change nothing
    alice_env = _env(db, tmp_path, "alice", LOGNAME=eve, USER=eve)
    cid = int(infrarsi("submit", contract, "--executor", "local", "--parsable", env=alice_env).stdout)
    (row,) = json.loads(infrarsi("campaign", "list", "--json", env=alice_env).stdout)
    assert (row["id"], row["owner"]) == (cid, db.names["alice"])

    # the second Unix user, with psql as itself: sees nothing of alice's and cannot cancel it
    seen = db.psql("eve", "SELECT count(*) FROM campaigns", unix_user=eve)
    assert seen.returncode == 0 and seen.stdout.strip() == "0", seen.stderr
    for sql, why in {"UPDATE campaigns SET state = 'cancelled' WHERE owner <> current_user": "permission denied",
                     f"SELECT infrarsi_cancel_campaign({cid})": f"no campaign {cid}"}.items():
        out = db.psql("eve", sql, unix_user=eve)
        assert out.returncode != 0 and why in out.stderr, (sql, out.stderr)
    # ... and through the CLI as its role, even claiming alice's name in LOGNAME
    eve_env = _env(db, tmp_path, "eve", LOGNAME=db.names["alice"], USER=db.names["alice"])
    assert json.loads(infrarsi("campaign", "list", "--json", env=eve_env).stdout) == []
    for verb in ("show", "cancel", "status"):
        out = infrarsi("campaign", verb, str(cid), env=eve_env, check=False)
        assert out.returncode == 2 and out.stderr == f"infrarsi: error: no campaign {cid}\n", (verb, out.stderr)
    mine = int(infrarsi("submit", contract, "--executor", "local", "--parsable", env=eve_env).stdout)
    assert [(c["id"], c["owner"]) for c in json.loads(infrarsi("campaign", "list", "--json", env=eve_env).stdout)] \
        == [(mine, eve)]
    reg = infrarsi("workload", "register", contract, env=eve_env, check=False)
    assert reg.returncode == 2 and reg.stderr.count("\n") == 1 and "permission denied for table workloads" in reg.stderr
    assert json.loads(infrarsi("campaign", "status", str(cid), "--json", env=alice_env).stdout)["state"] == "init"

    # the owner cancels their own; the admin cancels anyone's
    assert f"campaign {mine}: cancelled" in infrarsi("campaign", "cancel", str(mine), env=eve_env).stdout
    carol_env = _env(db, tmp_path, "carol")
    assert len(json.loads(infrarsi("campaign", "list", "--json", env=carol_env).stdout)) == 2
    assert f"campaign {cid}: cancelled" in infrarsi("campaign", "cancel", str(cid), env=carol_env).stdout
    assert "registered" in infrarsi("workload", "register", contract, env=carol_env).stdout

    # finance: the cost views, nothing else
    fin_env = _env(db, tmp_path, "fin")
    costs = json.loads(infrarsi("finops", "campaign_cost", "--format", "json", env=fin_env).stdout)
    assert sorted((r["campaign_id"], r["owner"], r["state"]) for r in costs) == \
        sorted([(cid, db.names["alice"], "cancelled"), (mine, eve, "cancelled")])
    out = infrarsi("campaign", "cancel", str(cid), env=fin_env, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("infrarsi: error: ")

    # the audit shows who did what: the admin sees all, the researcher only their own
    trail = json.loads(infrarsi("audit", "--json", env=carol_env).stdout)
    did = [(e["actor"], e["kind"], e["campaign_id"], (e["payload"] or {}).get("to")) for e in trail]
    assert did == [(db.names["alice"], "campaign.created", cid, None), (eve, "campaign.created", mine, None),
                   (eve, "campaign.state", mine, "cancelled"), (db.names["carol"], "campaign.state", cid, "cancelled"),
                   (db.names["carol"], "workload.registered", None, None)]
    by_carol = json.loads(infrarsi("audit", "--json", "--user", db.names["carol"], env=carol_env).stdout)
    assert {e["kind"] for e in by_carol} == {"campaign.state", "workload.registered"}
    assert {e["campaign_id"] for e in json.loads(infrarsi("audit", "--json", env=eve_env).stdout)} == {mine}
    table = infrarsi("audit", "--campaign", str(cid), env=carol_env).stdout
    assert f"init -> cancelled (cancelled by {db.names['carol']})" in table and db.names["alice"] in table


@pytest.mark.postgres
@pytest.mark.slurm
def test_a_researchers_cancel_stops_slurm_jobs_through_the_daemon(people: tuple[RolesDb, str], tmp_path: Path,
                                                                   toy_repo: Path) -> None:
    """The researcher cancels through infrarsi_cancel_campaign; the daemon (its own role) stops the jobs."""
    import time

    from sqlalchemy import create_engine, text

    from tests.campaign.helpers import git_env

    if shutil.which("squeue") is None:
        pytest.skip("Slurm is not installed (deploy/slurm-up.sh)")
    db, _ = people
    text_ = (toy_repo / "infrarsi.yaml").read_text().replace("--speed={value}", "--speed={value} --base=2.0")
    (toy_repo / "infrarsi.yaml").write_text(text_)  # slow trials: each update sleeps 2 s
    subprocess.run(["git", "-C", str(toy_repo), "commit", "-qam", "slow"], check=True, env=git_env())
    alice_env = _env(db, tmp_path, "alice")
    daemon_env = _env(db, tmp_path, "daemon", INFRARSI_POLL_S="1", INFRARSI_HOME=str(tmp_path / "daemon-home"))
    cid = int(infrarsi("submit", str(toy_repo / "infrarsi.yaml"), "--executor", "slurm", "--parsable",
                       env=alice_env).stdout)
    admin = create_engine(db.url)
    deadline = time.monotonic() + 120
    jobs: list[str] = []
    while not jobs and time.monotonic() < deadline:
        infrarsi("serve", "--once", env=daemon_env)
        with admin.connect() as conn:
            jobs = [r[0] for r in conn.execute(text("SELECT job_id FROM trials WHERE status='submitted'"))]
    assert jobs, "no Slurm job was submitted"
    out = infrarsi("campaign", "cancel", str(cid), env=alice_env)
    assert "cancelled (the daemon stops its running jobs)" in out.stdout
    while time.monotonic() < deadline:
        infrarsi("serve", "--once", env=daemon_env)
        with admin.connect() as conn:
            rows = conn.execute(text("SELECT status, outcome FROM trials")).all()
        if all(r.status == "ingested" for r in rows):
            break
    admin.dispose()
    assert all(r.status == "ingested" and r.outcome == "cancelled" for r in rows), rows
    queue = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(jobs)], capture_output=True, text=True)
    assert all("RUNNING" not in line and "PENDING" not in line for line in queue.stdout.splitlines()), queue.stdout
