"""Daemon metrics through prometheus-client: own registries, the scrape endpoint, counts from the outside."""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from infrarsi.controller.metrics import Metrics, serve_metrics, watch_ingest

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_two_daemons_in_one_process_keep_separate_series() -> None:
    a, b = Metrics(), Metrics()
    a.ticks.inc(3)
    a.set_leader(True, holder="host:1:abc", token=7)
    b.set_leader(False, holder="host:1:abc", token=7)
    assert a.values["infrarsi_ticks_total"] == 3 and b.values["infrarsi_ticks_total"] == 0
    assert a.values["infrarsi_leader"] == 1 and b.values["infrarsi_leader"] == 0
    assert a.sample("infrarsi_leader_info", {"holder": "host:1:abc", "token": "7"}) == 1
    b.set_leader(False, holder="host:2:def", token=8)  # the holder changed: one info series, the new one
    info = _families(b.render())["infrarsi_leader_info"]
    assert [(s.labels["holder"], s.labels["token"]) for s in info] == [("host:2:def", "8")]


def test_live_trials_by_executor_and_state_drop_to_zero() -> None:
    class T:
        def __init__(self, executor: str, status: str) -> None:
            self.executor, self.status = executor, status

    m = Metrics()
    m.set_live([T("slurm", "submitted")] * 3 + [T("slurm", "intent"), T("local", "submitted")])
    assert m.values["infrarsi_live_trials"] == 4 and m.values["infrarsi_queue_depth"] == 1
    assert m.sample("infrarsi_live_trials_by", {"executor": "slurm", "state": "submitted"}) == 3
    m.set_live([])
    assert m.sample("infrarsi_live_trials_by", {"executor": "slurm", "state": "submitted"}) == 0


def test_slurm_calls_come_from_the_executors_own_counts() -> None:
    from infrarsi.controller.executors.slurm_cli import SlurmCLI

    class Ex:
        def __init__(self) -> None:
            self.cli = SlurmCLI(runner=lambda argv: None)  # type: ignore[arg-type,return-value]

    exs = [Ex(), Ex()]
    exs[0].cli.calls.update({"squeue": 2, "sbatch": 5})
    exs[1].cli.calls.update({"squeue": 1, "sacct": 1})
    m = Metrics()
    m.watch_executors(lambda: exs)
    assert m.sample("infrarsi_slurm_calls_total", {"command": "squeue"}) == 3
    assert m.sample("infrarsi_slurm_calls_total", {"command": "sbatch"}) == 5
    assert m.sample("infrarsi_slurm_calls_total", {"command": "scancel"}) == 0
    exs[0].cli.calls["squeue"] += 1  # read at scrape time
    assert m.slurm_calls()["squeue"] == 4


def test_daemon_cycle_counts_queries_ingests_and_is_scraped(tmp_path: Path, infrarsi_home: Path) -> None:
    """A real daemon on the real SQLite store with the local executor: the scrape shows its work."""
    from infrarsi.controller.campaign.engine import CampaignEngine
    from infrarsi.controller.campaign.runner import create_campaign, executor_factory
    from infrarsi.controller.daemon import Daemon
    from infrarsi.controller.settings import Settings
    from infrarsi.controller.store import open_store
    from tests.campaign.helpers import TOY, git_repo

    repo = git_repo(TOY, tmp_path / "toy")
    settings = Settings.from_env()
    store = open_store()
    create_campaign(store, settings, str(repo / "infrarsi.yaml"), executor="local")
    engine = CampaignEngine(store, settings, executor_factory(settings))
    daemon = Daemon(store, engine, interval_s=0.01, lease_s=30)
    server = serve_metrics(daemon.metrics, 0)
    try:
        daemon.run(once=True)
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    fam = _families(text)
    assert {s.labels["state"]: s.value for s in fam["infrarsi_campaigns"]}["doctor"] == 1  # init -> doctor
    assert fam["infrarsi_ticks"][0].value == 1
    assert fam["infrarsi_db_queries"][0].value > 5  # counted by the SQLAlchemy listener
    assert fam["infrarsi_leader"][0].value == 0  # released on exit
    assert fam["infrarsi_leader_token"][0].value == 1
    assert [s for s in fam["infrarsi_tick_seconds"] if s.name.endswith("_count")][0].value == 1
    # the engine's store.ingest is counted: by outcome, and as a failure when the receipt was missing
    watch_ingest(daemon.metrics, store)  # idempotent: no double counting

    class Ing:
        outcome, signature_ok, receipt_raw = "crash", None, None

    daemon.metrics.count_ingest(Ing.outcome, Ing.signature_ok, False)
    assert daemon.metrics.sample("infrarsi_ingest_failures_total", {"reason": "no_receipt"}) == 1


def test_serve_refuses_a_taken_metrics_port_in_one_line(tmp_path: Path) -> None:
    from tests.campaign.helpers import cli_env, infrarsi

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        proc = infrarsi("serve", "--once", "--metrics-port", str(port), env=cli_env(tmp_path / "home"), check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and f"--metrics-port {port}" in err[0] and "cannot listen" in err[0], proc.stderr


def test_every_metric_is_documented() -> None:
    m = Metrics()
    m.watch_executors(lambda: [])
    names = {f.name for f in m.registry.collect()}
    doc = DOC.read_text()
    documented = set(re.findall(r"`(infrarsi_[a-z_]+)", doc))
    missing = sorted(n for n in names if n not in documented and n + "_total" not in documented)
    assert not missing, f"docs/operations.md does not list {missing}"
    assert "scrape_configs" in doc
