"""``--drain-after`` never stops between finished verification and the report, and ``infrarsi run --campaign N``
resumes a campaign from any working directory (a killed run finished elsewhere), refusing unknown or foreign ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infrarsi.controller.campaign.artifacts import report_dir
from infrarsi.controller.campaign.runner import drive
from tests.campaign.engine_world import World, make_world, run_until
from tests.campaign.helpers import cli_env, infrarsi


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def test_drain_after_verification_still_writes_the_report(world: World) -> None:
    eng = world.engine()
    cid = world.campaign(eng).id

    def last_promotion_live(c) -> bool:
        promo = eng.store.list_trials(c.id, stages=["promotion"])
        return c.state == "verify" and len(promo) == 2 and any(t.live for t in promo)

    run_until(eng, cid, last_promotion_live)
    launched = len(eng.store.list_trials(cid))
    c = drive(eng, cid, poll_s=0.01, drain_after_s=0.0)  # the drain starts at once: nothing new may launch
    assert c.state == "done", (c.state, c.error)
    assert (report_dir(c) / "REPORT.md").is_file() and (report_dir(c) / "pack.yaml").is_file()
    assert len(eng.store.list_trials(cid)) == launched


def test_drain_during_the_search_stops_with_nothing_live_and_resumes(world: World) -> None:
    eng = world.engine()
    cid = world.campaign(eng).id
    run_until(eng, cid, lambda c: c.state == "run" and bool(eng.store.live_trials([c.id]))
              and len(eng.store.list_trials(c.id, stages=["search"])) < c.budget_trials)
    launched = len(eng.store.list_trials(cid))
    c = drive(eng, cid, poll_s=0.01, drain_after_s=0.0)
    assert c.state == "run" and not eng.store.live_trials([cid])
    assert len(eng.store.list_trials(cid)) == launched  # the drain launched nothing
    eng2 = world.engine()  # resumed by a new "process"
    c = drive(eng2, cid, poll_s=0.01)
    assert c.state == "done", c.error


def _wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def test_a_killed_run_is_finished_by_id_from_another_directory(toy_repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home)
    proc = subprocess.Popen([sys.executable, "-m", "infrarsi.controller.cli.main", "run", "infrarsi.yaml"],
                            cwd=toy_repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        receipts = lambda: list((home / "scratch").glob("toy-*/trials/*/out/receipt.json"))  # noqa: E731
        _wait_for(lambda: len(receipts()) >= 2 or proc.poll() is not None, 300, "two finished trials")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)  # the CLI only: trials already launched are adopted on resume
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # no infrarsi.yaml here: only the id says which campaign
    out = infrarsi("run", "--campaign", "1", env=env, cwd=elsewhere, timeout=600)
    assert "resuming campaign 1" in out.stderr
    assert "campaign 1 done: delivered speedup" in out.stdout, out.stdout + out.stderr
    report = infrarsi("report", "--campaign", "1", "--path", env=env, cwd=elsewhere)
    assert Path(report.stdout.strip()).is_file()

    bad = infrarsi("run", "--campaign", "99", env=env, cwd=elsewhere, check=False)
    assert bad.returncode == 2 and "no campaign 99" in bad.stderr and "Traceback" not in bad.stderr


def test_run_refuses_someone_elses_campaign(toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infrarsi.controller.campaign.runner import create_campaign
    from infrarsi.controller.settings import Settings
    from infrarsi.controller.store import open_store

    home = tmp_path / "home"
    monkeypatch.setenv("INFRARSI_HOME", str(home))
    monkeypatch.delenv("INFRARSI_DATABASE_URL", raising=False)
    c = create_campaign(open_store(), Settings.from_env(), toy_repo / "infrarsi.yaml", owner="somebody-else")
    assert c.owner == "somebody-else"
    bad = infrarsi("run", "--campaign", str(c.id), env=cli_env(home), cwd=tmp_path, check=False)
    assert bad.returncode == 2, bad.stderr
    assert f"campaign {c.id} belongs to somebody-else, not to you" in bad.stderr
