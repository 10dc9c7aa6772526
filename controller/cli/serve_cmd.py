"""``infrarsi submit`` (sbatch-like: record a campaign and return) and ``infrarsi serve`` (the daemon)."""

from __future__ import annotations

import logging
import sys

import click

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.campaign.sbatch_options import ENV_VARS
from infrarsi.controller.campaign.runner import create_campaign, executor_factory
from infrarsi.controller.settings import Settings
from infrarsi.controller.store import open_store


@click.command("submit")
@click.argument("contract", type=click.Path(exists=True, dir_okay=False))
@click.option("--executor", type=click.Choice(["slurm", "local"]), default="slurm", show_default=True)
@click.option("--workload", help="Registered workload this campaign runs under (its limits apply).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--parsable", is_flag=True, help="Print only the campaign id (like sbatch --parsable).")
@click.option("-p", "--partition", envvar=ENV_VARS["partition"], help="Slurm partition of every trial job.")
@click.option("-A", "--account", envvar=ENV_VARS["account"], help="Slurm account charged for the trials.")
@click.option("--qos", envvar=ENV_VARS["qos"], help="Slurm quality of service.")
@click.option("-t", "--time", "time_", envvar=ENV_VARS["time"],
              help="Each trial's time limit, in any Slurm format (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]).")
@click.option("--gres", envvar=ENV_VARS["gres"], help="Generic resources per node, e.g. gpu:4 or gpu:h200:2.")
@click.option("-N", "--nodes", type=int, envvar=ENV_VARS["nodes"], help="Nodes per trial (multi-node launchers).")
@click.option("--constraint", envvar=ENV_VARS["constraint"], help="Slurm node features, e.g. h200&ib.")
@click.option("--exclusive", is_flag=True, envvar=ENV_VARS["exclusive"], help="Trials take whole nodes.")
@click.option("--mail-user", envvar=ENV_VARS["mail_user"], help="Where Slurm sends job mail.")
@click.option("--mail-type", envvar=ENV_VARS["mail_type"], help="Slurm mail events (BEGIN,END,FAIL,ALL,...).")
@click.pass_context
def submit_cmd(ctx: click.Context, contract: str, executor: str, workload: str | None, seed: int, parsable: bool,
               partition: str | None, account: str | None, qos: str | None, time_: str | None, gres: str | None,
               nodes: int | None, constraint: str | None, exclusive: bool, mail_user: str | None,
               mail_type: str | None) -> None:
    """Validate CONTRACT and queue a campaign for the daemon; prints the campaign id and returns.

    Takes sbatch's common options, applied to every trial job of the campaign and overriding the contract's
    launch section and the registered workload within the admins' limits; each reads an ``INFRARSI_*`` default
    from the environment the way sbatch reads ``SBATCH_*`` (INFRARSI_PARTITION, INFRARSI_ACCOUNT, INFRARSI_QOS,
    INFRARSI_TIMELIMIT, INFRARSI_GRES, INFRARSI_NODES, INFRARSI_CONSTRAINT, INFRARSI_EXCLUSIVE,
    INFRARSI_MAIL_USER, INFRARSI_MAIL_TYPE); the command line wins.  On Slurm, Slurm itself is asked whether it
    would accept them (``sbatch --test-only``).

    The owner is who you are to the database (your PostgreSQL role; your OS user on SQLite), never LOGNAME."""
    from click.core import ParameterSource

    from infrarsi.controller.campaign.sbatch_options import (
        SLURM_ONLY, SbatchOptions, check_limits, check_with_slurm,
    )
    from infrarsi.controller.contract import load_contract
    from infrarsi.controller.errors import InfrarsiError

    given = {"partition": partition, "account": account, "qos": qos, "time": time_, "gres": gres, "nodes": nodes,
             "constraint": constraint, "exclusive": exclusive, "mail_user": mail_user, "mail_type": mail_type}
    if executor == "local":  # Slurm-only options: refused when typed, ignored when only the environment sets them
        typed = [k for k in SLURM_ONLY if given[k] and
                 ctx.get_parameter_source("time_" if k == "time" else k) == ParameterSource.COMMANDLINE]
        if typed:
            raise InfrarsiError(f"--{typed[0].replace('_', '-')}: a Slurm option, but this campaign runs on the "
                                "local executor (--executor slurm)")
        given = {k: (False if k == "exclusive" else None) if k in SLURM_ONLY else v for k, v in given.items()}
    opts = SbatchOptions(**given).validated()
    store = open_store()
    c_model = load_contract(contract)
    try:
        wl = store.get_workload(workload) if workload else None
    except KeyError as exc:
        raise InfrarsiError(str(exc.args[0])) from None
    check_limits(opts, c_model, wl, _partition_limits())
    if executor == "slurm" and opts:
        launch = opts.launch(c_model.launch)
        if opts.partition is None and wl is not None and wl.partition:
            launch = launch.model_copy(update={"partition": wl.partition})
        check_with_slurm(opts, launch)
    c = create_campaign(store, Settings.from_env(), contract, executor=executor, workload=workload, seed=seed,
                        sbatch=opts.to_dict() or None)
    extra = " ".join(f"{k}={v}" for k, v in opts.to_dict().items())
    click.echo(str(c.id) if parsable else f"Submitted campaign {c.id} ({c.name}, executor {executor}, owner {c.owner}"
               + (f"; {extra}" if extra else "") + ")")


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
