"""``infrarsi queue`` (issue 16, item 10): my campaigns and their running trials like ``squeue --me``, on a real
Slurm: a campaign submitted with sbatch options, advanced by the daemon until its reference trials are Slurm jobs.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from infrarsi.controller.campaign.runner import create_campaign
from infrarsi.controller.settings import Settings
from infrarsi.controller.store import open_store
from tests.campaign.helpers import cli_env, infrarsi
from tests.executors.conftest import slurm_cluster  # noqa: F401  (the real Slurm fixture)


def _queue(env: dict[str, str], *args: str) -> dict:
    return json.loads(infrarsi("queue", "--json", *args, env=env).stdout)


@pytest.mark.slurm
def test_queue_lists_my_campaigns_and_their_slurm_jobs(slurm_cluster: str, tmp_path: Path,  # noqa: F811
                                                        toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    env = cli_env(home, INFRARSI_POLL_S="0.5")
    contract = str(toy_repo / "infrarsi.yaml")
    assert infrarsi("queue", env=env).stdout.startswith("no open campaigns of ")
    cid = int(infrarsi("submit", contract, "-p", "cpu", "-t", "5", "--parsable", env=env).stdout)
    # someone else's campaign in the same database: hidden by default, listed with --all
    monkeypatch.setenv("INFRARSI_HOME", str(home))
    store = open_store(f"sqlite:///{home / 'infrarsi.sqlite'}")
    other = create_campaign(store, Settings.from_env(), contract, executor="slurm", owner="bob")
    assert [r["campaign"] for r in _queue(env)["campaigns"]] == [cid]
    assert {r["campaign"]: r["owner"] for r in _queue(env, "--all")["campaigns"]}[other.id] == "bob"

    deadline = time.monotonic() + 120
    while not [t for t in store.list_trials(cid) if t.job_id]:  # the daemon locks the scope, then launches refs
        assert time.monotonic() < deadline, "the daemon never submitted a reference trial"
        infrarsi("serve", "--once", env=env, timeout=120)
    try:
        q = _queue(env, "--trials")
        (row,) = [r for r in q["campaigns"] if r["campaign"] == cid]
        submitted = [t for t in store.list_trials(cid) if t.status == "submitted"]
        assert row["state"] == "doctor" and row["running"] >= len(submitted) >= 1 and row["partition"] == "cpu"
        assert set(row["jobs"].split(",")) == {t.job_id for t in submitted}
        trows = [t for t in q["trials"] if t["campaign"] == cid]
        assert {t["jobid"] for t in trows if t["jobid"] != "-"} == {t.job_id for t in submitted}
        assert {t["dir"] for t in trows} == {t.trial_key[:16] for t in store.list_trials(cid) if t.status in
                                            ("intent", "submitted")}
        for t in submitted:  # real Slurm jobs, on the partition the submit asked for
            shown = subprocess.run(["scontrol", "show", "job", "-o", t.job_id], capture_output=True,
                                   text=True).stdout
            assert "Partition=cpu" in shown and "TimeLimit=00:06:00" in shown, shown
        table = infrarsi("queue", "--trials", env=env).stdout
        assert table.splitlines()[0].split()[:4] == ["CAMPAIGN", "NAME", "OWNER", "STATE"]
        assert submitted[0].job_id in table and submitted[0].trial_key[:16] in table
    finally:
        infrarsi("campaign", "cancel", str(cid), env=env, timeout=180)
    assert _queue(env)["campaigns"] == []
    done = _queue(env, "--finished")["campaigns"]
    assert [(r["campaign"], r["state"], r["running"]) for r in done] == [(cid, "cancelled", 0)]
