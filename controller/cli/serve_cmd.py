"""``infrarsi submit`` (sbatch-like: record a campaign and return) and ``infrarsi serve`` (the daemon)."""

from __future__ import annotations

import logging
import sys

import click

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.campaign.runner import create_campaign, executor_factory
from infrarsi.controller.settings import Settings
from infrarsi.controller.store import open_store


@click.command("submit")
@click.argument("contract", type=click.Path(exists=True, dir_okay=False))
@click.option("--executor", type=click.Choice(["slurm", "local"]), default="slurm", show_default=True)
@click.option("--workload", help="Registered workload this campaign runs under (its limits apply).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--parsable", is_flag=True, help="Print only the campaign id (like sbatch --parsable).")
def submit_cmd(contract: str, executor: str, workload: str | None, seed: int, parsable: bool) -> None:
    """Validate CONTRACT and queue a campaign for the daemon; prints the campaign id and returns.

    The owner is who you are to the database (your PostgreSQL role; your OS user on SQLite), never LOGNAME."""
    store = open_store()
    c = create_campaign(store, Settings.from_env(), contract, executor=executor, workload=workload, seed=seed)
    click.echo(str(c.id) if parsable else f"Submitted campaign {c.id} ({c.name}, executor {executor}, owner {c.owner})")


@click.command("serve")
@click.option("--interval", type=float, default=5.0, show_default=True, help="Seconds between cycles.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics (GET /metrics) on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics endpoint listens on (0.0.0.0 for a remote Prometheus).")
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
@click.option("--exit-when-idle", is_flag=True, help="Exit once no campaign is open (tests, batch use).")
@click.option("--log-level", default="INFO", show_default=True)
def serve_cmd(interval: float, metrics_port: int | None, metrics_host: str, once: bool, exit_when_idle: bool,
              log_level: str) -> None:
    """Run the controller daemon: advance every open campaign, one acting daemon per database."""
    from infrarsi.controller.daemon import Daemon, JsonFormatter
    from infrarsi.controller.metrics import Metrics, serve_metrics

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("infrarsi")
    root.handlers[:] = [handler]
    root.setLevel(log_level.upper())
    settings = Settings.from_env()
    store = open_store()
    engine = CampaignEngine(store, settings, executor_factory(settings),
                            progress=lambda m: logging.getLogger("infrarsi.engine").info(m),
                            partition_limits=_partition_limits())
    metrics = Metrics()
    if metrics_port is not None:
        try:
            serve_metrics(metrics, metrics_port, metrics_host)
        except OSError as exc:
            raise click.ClickException(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: "
                                       f"{exc.strerror or exc}") from None
    Daemon(store, engine, interval_s=interval, metrics=metrics).run(once=once, exit_when_idle=exit_when_idle)


def _partition_limits() -> dict[str, int]:
    """Per-partition limits on live trials: the config file's ``partition_limits``, overridden by
    ``INFRARSI_PARTITION_LIMITS="gpu=64,debug=4"``."""
    import os

    from infrarsi.controller.config import daemon_config

    out = dict(daemon_config().partition_limits)
    for part in filter(None, os.environ.get("INFRARSI_PARTITION_LIMITS", "").split(",")):
        name, _, n = part.partition("=")
        out[name.strip()] = int(n)
    return out
