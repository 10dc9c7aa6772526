"""Crash safety: the daemon is SIGKILLed mid-campaign and restarted; every trial is accounted exactly once.

Kill points (``infrarsi.controller.faults``): after a submit intent is stored but before the executor is called,
after the job was launched but before its job id is stored (the restarted daemon must adopt the running job,
not launch a duplicate), and inside the ingest transaction.  Each runs with the local executor and on the real
single-node Slurm.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.campaign.helpers import cli_env, infrarsi

def log_runs(toy_repo: Path, run_log: Path) -> dict[str, str]:
    """Make every toy job append to ``run_log`` (via the contract's ``launch.env``; jobs get an allow-listed
    environment) and return the extra environment the CLI needs: no bubblewrap, whose private /tmp would hide
    the log.  These tests are about the controller, not the sandbox."""
    contract = toy_repo / "infrarsi.yaml"
    contract.write_text(contract.read_text().replace("launch:\n", f'launch:\n  env: {{TOY_RUN_LOG: "{run_log}"}}\n', 1))
    subprocess.run(["git", "-C", str(toy_repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
                    "log runs"], check=True)
    return {"TOY_RUN_LOG": str(run_log), "INFRARSI_ISOLATION": "none"}


POINTS = [("after_intent", "3"), ("after_submit", "2"), ("in_ingest", "3")]


def _check_accounting(home: Path, run_log: Path, campaign_id: int, url: str | None = None) -> dict:
    db = create_engine(url or f"sqlite:///{home / 'infrarsi.sqlite'}")
    with db.connect() as conn:
        trials = conn.execute(text("SELECT id, trial_key, status, outcome, stage FROM trials WHERE campaign_id=:c"),
                              {"c": campaign_id}).all()
        costs = conn.execute(text("SELECT trial_id, COUNT(*) FROM cost_ledger WHERE trial_id IS NOT NULL "
                                  "GROUP BY trial_id")).all()
        obs = conn.execute(text("SELECT trial_id, COUNT(*) FROM observations GROUP BY trial_id")).all()
        state = conn.execute(text("SELECT state, delivered_speedup, error FROM campaigns WHERE id=:c"),
                             {"c": campaign_id}).one()
    keys = [t.trial_key for t in trials]
    assert len(keys) == len(set(keys)), "a trial was recorded twice"
    assert all(t.status == "ingested" for t in trials), [(t.trial_key, t.status) for t in trials]
    assert {tid for tid, _ in costs} == {t.id for t in trials} and all(n == 1 for _, n in costs)
    assert {tid for tid, _ in obs} == {t.id for t in trials} and all(n == 1 for _, n in obs)
    runs = [json.loads(line) for line in run_log.read_text().splitlines()]
    cwds = [r["cwd"] for r in runs]
    assert len(cwds) == len(set(cwds)), "a trial's job ran twice"
    assert len(runs) == len(trials), (len(runs), len(trials))
    return {"state": state.state, "speedup": state.delivered_speedup, "error": state.error, "trials": len(trials)}


def _campaign_with_crash(tmp_path: Path, toy_repo: Path, executor: str, point: str, nth: str) -> dict:
    home = tmp_path / "home"
    run_log = tmp_path / "runs.jsonl"
    env = cli_env(home, INFRARSI_POLL_S="1", **log_runs(toy_repo, run_log))
    cid = int(infrarsi("submit", str(toy_repo / "infrarsi.yaml"), "--executor", executor, "--parsable",
                       env=env).stdout.strip())
    crashed = infrarsi("serve", "--interval", "0.2", "--exit-when-idle", env={**env, "INFRARSI_CRASH_AT": f"{point}:{nth}"},
                       check=False)
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr[-2000:])
    infrarsi("serve", "--interval", "0.2", "--exit-when-idle", env=env)
    return _check_accounting(home, run_log, cid)


@pytest.mark.parametrize("point,nth", POINTS, ids=[p for p, _ in POINTS])
def test_sigkill_local(tmp_path: Path, toy_repo: Path, point: str, nth: str) -> None:
    out = _campaign_with_crash(tmp_path, toy_repo, "local", point, nth)
    assert out["state"] == "done", out
    assert out["trials"] >= 2 + 4


@pytest.mark.slurm
@pytest.mark.parametrize("point,nth", POINTS, ids=[p for p, _ in POINTS])
def test_sigkill_slurm(tmp_path: Path, toy_repo: Path, point: str, nth: str) -> None:
    if shutil.which("sbatch") is None:
        pytest.skip("Slurm is not installed (deploy/slurm-up.sh)")
    out = _campaign_with_crash(tmp_path, toy_repo, "slurm", point, nth)
    assert out["state"] == "done", out


def test_embedded_run_resumes_after_sigkill(tmp_path: Path, toy_repo: Path) -> None:
    """``infrarsi run`` killed mid-search resumes the same campaign when run again."""
    home = tmp_path / "home"
    run_log = tmp_path / "runs.jsonl"
    env = cli_env(home, **log_runs(toy_repo, run_log))
    crashed = infrarsi("run", env={**env, "INFRARSI_CRASH_AT": "after_submit:4"}, cwd=toy_repo, check=False)
    assert crashed.returncode == -signal.SIGKILL
    again = infrarsi("run", env=env, cwd=toy_repo)
    assert "resuming campaign 1" in again.stderr
    out = _check_accounting(home, run_log, 1)
    assert out["state"] == "done"
    assert out["speedup"] > 1.5, out  # speed=4 quarters the sleep: far beyond noise
    report = (Path(json.loads(infrarsi("campaign", "show", "1", "--json", env=env).stdout)["workdir"]) /
              "report" / "REPORT.md")
    assert report.is_file()
    # offline re-verification from the real store agrees with the online verdicts
    rejudged = infrarsi("verify", "--rejudge", "1", env=env)
    db = create_engine(f"sqlite:///{home / 'infrarsi.sqlite'}")
    with db.connect() as conn:
        online_rejected = conn.execute(text("SELECT COUNT(*) FROM trials WHERE outcome='rejected'")).scalar()
    total = out["trials"]
    assert f"total {total}: {total - online_rejected} valid, {online_rejected} rejected" in rejudged.stdout, \
        rejudged.stdout
