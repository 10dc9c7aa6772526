"""Faults stay inside their campaign: a poisoned campaign is retried with backoff, then failed with a one-line
reason, while the daemon serves the others and restarts cleanly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.campaign.helpers import cli_env, infrarsi

POISON_KNOB = """  - name: scale
    values: [1, 2]
    reference: 1
    apply: {config: {file: knobs.json, key: scale}}
"""


def _poisoned_repo(toy_repo: Path) -> Path:
    """The toy with a config knob whose JSON file is not JSON: every launch of it raises JSONDecodeError."""
    contract = toy_repo / "infrarsi.yaml"
    contract.write_text(contract.read_text().replace("knobs:\n", "knobs:\n" + POISON_KNOB, 1)
                        .replace("editable_files: [train.py]", "editable_files: [train.py, knobs.json]"))
    (toy_repo / "knobs.json").write_text("{scale: 1,,}\n")
    subprocess.run(["git", "-C", str(toy_repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(toy_repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                    "poison"], check=True)
    return toy_repo


def test_poisoned_campaign_fails_alone_and_serve_restarts_cleanly(tmp_path: Path, toy_repo: Path) -> None:
    from tests.campaign.helpers import TOY, git_repo

    good = git_repo(TOY, tmp_path / "good")
    bad = _poisoned_repo(toy_repo)
    env = cli_env(tmp_path / "home")
    bad_id = int(infrarsi("submit", str(bad / "infrarsi.yaml"), "--executor", "local", "--parsable", env=env).stdout)
    good_id = int(infrarsi("submit", str(good / "infrarsi.yaml"), "--executor", "local", "--parsable",
                           env=env).stdout)
    worst_id = int(infrarsi("submit", str(good / "infrarsi.yaml"), "--executor", "local", "--parsable",
                            env=env).stdout)
    from sqlalchemy import create_engine, text

    db = create_engine(f"sqlite:///{tmp_path / 'home' / 'infrarsi.sqlite'}")
    with db.begin() as conn:  # a stored contract damaged after submit: the engine itself raises (ParserError)
        conn.execute(text("UPDATE campaigns SET contract_yaml = 'knobs: [{' WHERE id = :c"), {"c": worst_id})
    served = infrarsi("serve", "--interval", "0.1", "--exit-when-idle", env=env, check=False)
    assert served.returncode == 0 and "Traceback" not in served.stderr, served.stderr[-3000:]
    show = {cid: json.loads(infrarsi("campaign", "show", str(cid), "--json", env=env).stdout)
            for cid in (bad_id, good_id, worst_id)}
    assert show[good_id]["state"] == "done", show[good_id]
    assert show[bad_id]["state"] == "failed" and "knobs.json" in show[bad_id]["error"]  # the engine names it
    assert "\n" not in show[bad_id]["error"]
    assert show[worst_id]["state"] == "failed"
    error = show[worst_id]["error"]
    assert "\n" not in error and error.startswith("daemon gave up after 4 failed ticks: ParserError"), error
    assert "(at " in error  # where it broke
    faults = [json.loads(line) for line in served.stderr.splitlines() if '"campaign tick failed' in line]
    assert [f["attempt"] for f in faults] == [1, 2, 3] and [f["retry_in_cycles"] for f in faults] == [1, 2, 4]
    # restarting the daemon is clean: nothing left to crash on, the failed campaign's trial is accounted
    again = infrarsi("serve", "--once", env=env, check=False)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    text_ = infrarsi("campaign", "show", str(worst_id), env=env).stdout
    assert "failed" in text_ and "daemon gave up after 4 failed ticks: ParserError" in text_
    with db.connect() as conn:
        kinds = conn.execute(text("SELECT kind, payload FROM events WHERE campaign_id = :c ORDER BY id"),
                             {"c": worst_id}).all()
        live = conn.execute(text("SELECT COUNT(*) FROM trials WHERE status <> 'ingested'")).scalar()
    assert [json.loads(p)["attempt"] for k, p in kinds if k == "campaign.fault"] == [1, 2, 3, 4]
    with db.connect() as conn:  # the other campaigns never faulted
        assert conn.execute(text("SELECT COUNT(*) FROM events WHERE kind = 'campaign.fault' AND campaign_id <> :c"),
                            {"c": worst_id}).scalar() == 0
    assert any(k == "campaign.state" and json.loads(p)["to"] == "failed" for k, p in kinds)
    assert live == 0


def test_transient_executor_outage_fails_nothing(toy_repo: Path, infrarsi_home: Path) -> None:
    """The executor unreachable (slurmctld down) for longer than the fault retries: nothing is failed, and the
    campaign completes once it is back.  The real local executor, behind a switch that makes it unreachable."""
    import time
    from typing import Any

    from infrarsi.controller.campaign.engine import CampaignEngine
    from infrarsi.controller.campaign.runner import create_campaign, executor_factory
    from infrarsi.controller.daemon import Daemon
    from infrarsi.controller.errors import ExecutorError
    from infrarsi.controller.settings import Settings
    from infrarsi.controller.store import open_store

    settings = Settings.from_env()
    store = open_store()
    cid = create_campaign(store, settings, str(toy_repo / "infrarsi.yaml"), executor="local").id
    real = executor_factory(settings)
    down = {"on": True}

    class Switched:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self.inner, name)
            if name in ("submit", "poll", "free_slots", "adopt") and down["on"]:
                def refuse(*_: Any, **__: Any) -> Any:
                    raise ExecutorError("slurmctld unreachable: Connection refused")
                return refuse
            return attr

    engine = CampaignEngine(store, settings, lambda name: Switched(real(name)))
    daemon = Daemon(store, engine, interval_s=0.05, lease_s=30)
    assert daemon.lease.acquire()
    store.set_fence(daemon.lease)
    for _ in range(12):  # three times the fault budget
        daemon.cycle()
    assert store.get_campaign(cid).state == "doctor"  # init needs no executor; doctor waits for it
    assert daemon.metrics.values["infrarsi_tick_errors_total"] >= 11
    assert daemon.metrics.values["infrarsi_campaign_faults_total"] == 0
    assert not [e for e in store.events(cid) if e["kind"] == "campaign.fault"]
    down["on"] = False
    deadline = time.monotonic() + 240
    while store.get_campaign(cid).state not in ("done", "failed"):
        assert time.monotonic() < deadline, store.get_campaign(cid)
        daemon.cycle()
        time.sleep(0.05)
    assert store.get_campaign(cid).state == "done", store.get_campaign(cid).error
    daemon.lease.release()
