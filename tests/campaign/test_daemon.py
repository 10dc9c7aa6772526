"""The daemon on PostgreSQL: two daemons never both act, metrics are served, cancel stops Slurm jobs."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.campaign.helpers import cli_env, git_env, infrarsi
from tests.campaign.test_daemon_recovery import _check_accounting, log_runs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "infrarsi.controller.cli.main", "serve", "--interval", "0.2",
                             "--exit-when-idle", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.postgres
def test_two_daemons_one_acts_and_metrics(tmp_path: Path, toy_repo: Path, pg_url: str) -> None:
    run_log = tmp_path / "runs.jsonl"
    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=pg_url, **log_runs(toy_repo, run_log))
    infrarsi("db", "upgrade", env=env)
    cid = int(infrarsi("submit", str(toy_repo / "infrarsi.yaml"), "--executor", "local", "--parsable",
                       env=env).stdout)
    port = _free_port()
    a = _serve(env, "--metrics-port", str(port))
    # b starts only once a holds the lease (a condition, not a sleep): then a must be the one that acts
    lead_deadline = time.monotonic() + 60
    while time.monotonic() < lead_deadline and a.poll() is None:
        try:
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            if any(line.split()[-1] in ("1", "1.0") for line in page.splitlines() if line.startswith("infrarsi_leader ")):
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        raise AssertionError("the first daemon never took the leader lease")
    b = _serve(env)
    metrics = ""
    deadline = time.monotonic() + 240
    while a.poll() is None and time.monotonic() < deadline:
        try:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except OSError:
            pass
        time.sleep(0.5)
    a_err = a.communicate(timeout=240)[1]
    b_err = b.communicate(timeout=240)[1]
    assert a.returncode == 0 and b.returncode == 0, (a_err[-2000:], b_err[-2000:])
    assert "acting as leader" in a_err
    assert "standing by" in b_err  # the second daemon waited while the first held the lock
    assert "infrarsi_live_trials" in metrics and 'infrarsi_campaigns{state="run"}' in metrics
    assert "infrarsi_leader 1" in metrics
    assert "infrarsi_leader_token 1" in metrics and 'infrarsi_leader_info{holder="' in metrics  # the lease
    out = _check_accounting(tmp_path / "home", run_log, cid, url=pg_url)
    assert out["state"] == "done"


@pytest.mark.slurm
def test_cancel_stops_slurm_jobs(tmp_path: Path, toy_repo: Path) -> None:
    if shutil.which("squeue") is None:
        pytest.skip("Slurm is not installed (deploy/slurm-up.sh)")
    text_ = (toy_repo / "infrarsi.yaml").read_text().replace("--speed={value}", "--speed={value} --base=2.0")
    (toy_repo / "infrarsi.yaml").write_text(text_)  # slow trials: each update sleeps 2 s
    subprocess.run(["git", "-C", str(toy_repo), "commit", "-qam", "slow"], check=True, env=git_env())
    env = cli_env(tmp_path / "home", INFRARSI_POLL_S="1")
    cid = int(infrarsi("submit", str(toy_repo / "infrarsi.yaml"), "--executor", "slurm", "--parsable", env=env).stdout)
    for _ in range(20):
        infrarsi("serve", "--once", env=env)
        db = create_engine(f"sqlite:///{tmp_path / 'home' / 'infrarsi.sqlite'}")
        with db.connect() as conn:
            jobs = [r[0] for r in conn.execute(text("SELECT job_id FROM trials WHERE status='submitted'"))]
        if jobs:
            break
        time.sleep(0.5)
    assert jobs, "no Slurm job was submitted"
    out = infrarsi("campaign", "cancel", str(cid), env=env)
    assert "cancelled" in out.stdout
    gone_deadline = time.monotonic() + 60  # scancel is asynchronous: wait for Slurm to say so, with a deadline
    while True:
        queue = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(jobs)], capture_output=True, text=True)
        if all("RUNNING" not in line and "PENDING" not in line for line in queue.stdout.splitlines()):
            break
        assert time.monotonic() < gone_deadline, queue.stdout
        time.sleep(0.2)
    with db.connect() as conn:
        rows = conn.execute(text("SELECT status, outcome FROM trials")).all()
        state = conn.execute(text("SELECT state FROM campaigns WHERE id=:c"), {"c": cid}).scalar()
    assert state == "cancelled"
    assert all(r.status == "ingested" and r.outcome == "cancelled" for r in rows), rows
