"""The daemon's leader lease on PostgreSQL: a stopped leader is fenced, a database restart is survived, and a
role without rights on the lease table cannot stall the daemon.

Each test drives real ``infrarsi serve`` processes on the toy workload (local executor) and checks the books
afterwards: every trial, event and cost row exactly once, and no job run twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from sqlalchemy import create_engine, text

from tests.campaign.helpers import cli_env, infrarsi
from tests.campaign.test_daemon_recovery import _check_accounting, log_runs

LEASE = {"INFRARSI_LEASE_S": "3", "INFRARSI_LEASE_RENEW_S": "0.5"}

pytestmark = pytest.mark.postgres


def _serve(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "infrarsi.controller.cli.main", "serve", "--interval", "0.2",
                             "--exit-when-idle"], env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))


def _wait(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _scalar(url: str, sql: str) -> int:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            return int(conn.execute(text(sql)).scalar() or 0)
    finally:
        eng.dispose()


def _slow_campaign(tmp_path: Path, toy_repo: Path, pg_url: str) -> tuple[dict[str, str], Path, int]:
    contract = toy_repo / "infrarsi.yaml"  # each update sleeps 0.25 s: a trial lasts ~2-3 s
    contract.write_text(contract.read_text().replace("--speed={value}", "--speed={value} --base=0.25"))
    run_log = tmp_path / "runs.jsonl"
    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=pg_url, INFRARSI_POLL_S="0.5", **LEASE,
                  **log_runs(toy_repo, run_log))
    infrarsi("db", "upgrade", env=env)
    cid = int(infrarsi("submit", str(contract), "--executor", "local", "--parsable", env=env).stdout)
    return env, run_log, cid


def _check_events_once(url: str, cid: int) -> None:
    eng = create_engine(url)
    with eng.connect() as conn:
        dup = conn.execute(text(
            "SELECT trial_id, kind, COUNT(*) FROM events WHERE campaign_id = :c AND trial_id IS NOT NULL "
            "AND kind IN ('trial.intent', 'trial.submitted', 'trial.finished', 'trial.ingested') "
            "GROUP BY trial_id, kind HAVING COUNT(*) > 1"), {"c": cid}).all()
        states = conn.execute(text("SELECT payload FROM events WHERE campaign_id = :c AND kind = 'campaign.state' "
                                   "ORDER BY id"), {"c": cid}).scalars().all()
    eng.dispose()
    assert dup == [], f"events recorded twice: {dup}"
    moves = [(p["from"], p["to"]) for p in states]
    assert len(moves) == len(set(moves)), f"a state change was recorded twice: {moves}"


def test_stopped_leader_is_fenced_and_nothing_happens_twice(tmp_path: Path, toy_repo: Path, pg_url: str) -> None:
    env, run_log, cid = _slow_campaign(tmp_path, toy_repo, pg_url)
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = _serve(env, a_log)
    b: subprocess.Popen | None = None
    try:
        _wait(lambda: _scalar(pg_url, "SELECT COUNT(*) FROM trials WHERE status = 'submitted'") >= 1,
              "the first leader to launch a trial")
        os.kill(a.pid, signal.SIGSTOP)
        paused_at = _scalar(pg_url, "SELECT COALESCE(MAX(id), 0) FROM trials")
        assert _scalar(pg_url, "SELECT token FROM leader_lease WHERE name = 'daemon'") == 1
        b = _serve(env, b_log)
        _wait(lambda: _scalar(pg_url, f"SELECT COUNT(*) FROM trials WHERE id > {paused_at} "
                                      "AND status <> 'intent'") >= 1, "the standby to take over and launch")
        assert _scalar(pg_url, "SELECT token FROM leader_lease WHERE name = 'daemon'") == 2
        os.kill(a.pid, signal.SIGCONT)
        assert b.wait(timeout=300) == 0, b_log.read_text()[-3000:]
        assert a.wait(timeout=120) == 0, a_log.read_text()[-3000:]
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    a_text, b_text = a_log.read_text(), b_log.read_text()
    assert "fenced: lease 'daemon'" in a_text and "standing by" in a_text, a_text[-3000:]
    assert "acting as leader" in b_text and "Traceback" not in a_text + b_text
    out = _check_accounting(tmp_path / "home", run_log, cid, url=pg_url)
    assert out["state"] == "done", out
    _check_events_once(pg_url, cid)
    # the old leader came back as a standby and took the lease only after the new one let it go (token 3)
    assert _scalar(pg_url, "SELECT token FROM leader_lease WHERE name = 'daemon'") == 3


def _pg(action: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action], check=True,
                   capture_output=True, timeout=120)


@pytest.fixture
def restartable_pg_url(pg_server: str) -> Iterator[str]:
    """Like ``pg_url``, but its admin engine pings before use: it outlives the server restart."""
    if not Path("/etc/postgresql").is_dir():
        pytest.skip("no local PostgreSQL cluster to restart")
    name = f"infrarsi_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(pg_server, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield pg_server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        _wait(lambda: subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0, "PostgreSQL", 60)
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n "
                              "AND pid <> pg_backend_pid()"), {"n": name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def test_database_restart_under_a_running_daemon(tmp_path: Path, toy_repo: Path, restartable_pg_url: str) -> None:
    pg_url = restartable_pg_url
    env, run_log, cid = _slow_campaign(tmp_path, toy_repo, pg_url)
    log = tmp_path / "serve.log"
    d = _serve(env, log)
    try:
        _wait(lambda: _scalar(pg_url, "SELECT COUNT(*) FROM trials WHERE status = 'submitted'") >= 1,
              "the daemon to launch a trial")
        _pg("stop")  # a restart whose downtime the daemon is seen to notice
        try:
            _wait(lambda: "database unavailable" in log.read_text() or "lease renewal failed" in log.read_text(),
                  "the daemon to notice the outage", timeout=60)
        finally:
            _pg("start")
        assert d.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    text_ = log.read_text()
    assert "Traceback" not in text_
    out = _check_accounting(tmp_path / "home", run_log, cid, url=pg_url)
    assert out["state"] == "done", out
    _check_events_once(pg_url, cid)
    # kept the lease (token 1) or took it again after it expired during the outage (token 2); nobody else did
    assert _scalar(pg_url, "SELECT token FROM leader_lease WHERE name = 'daemon'") in (1, 2)


def test_a_role_without_lease_rights_cannot_stall_the_daemon(pg_url: str) -> None:
    from infrarsi.controller.store import open_store
    from infrarsi.controller.store.lease import grant_sql

    store = open_store(pg_url, auto_upgrade=True)
    finance, daemon = f"fin_{uuid.uuid4().hex[:8]}", f"dmn_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for role in (finance, daemon):
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(grant_sql(daemon)))
    fin = create_engine(pg_url.replace("postgres@", f"{finance}@"))
    dmn = create_engine(pg_url.replace("postgres@", f"{daemon}@"))
    fin_conn = fin.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        # what stalled the old daemon forever: any role may take advisory locks -- now irrelevant
        assert fin_conn.execute(text("SELECT pg_try_advisory_lock(32482785)")).scalar() is True
        for sql in ("SELECT * FROM leader_lease FOR UPDATE", "SELECT * FROM leader_lease FOR SHARE",
                    "LOCK TABLE leader_lease", "UPDATE leader_lease SET token = token + 100"):
            with fin.connect() as conn, pytest.raises(Exception, match="permission denied"):
                conn.execute(text(sql))
        from infrarsi.controller.store.lease import SqlLease

        lease = SqlLease(dmn, lease_s=30)
        started = time.monotonic()
        assert lease.acquire() and lease.token == 1  # the grant is all the daemon role needs
        assert time.monotonic() - started < 5
        assert store.lease_info() is not None and store.lease_info().holder == lease.holder  # type: ignore[union-attr]
        lease.release()
    finally:
        fin_conn.close()
        fin.dispose()
        dmn.dispose()
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN (:a, :b)"),
                         {"a": finance, "b": daemon})
            for role in (finance, daemon):
                conn.execute(text(f'DROP OWNED BY "{role}"'))
                conn.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()
