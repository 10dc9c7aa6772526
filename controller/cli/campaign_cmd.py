"""``infrarsi campaign list|show|status|watch|cancel``.

``campaign show`` names each trial by its directory (``trials/<dir>/`` under the campaign's workdir: the first 16
characters of the trial key, the same id the trial directories carry) beside the scheduler's job id, and gives each
failed trial's readable reason (its log is ``trials/<dir>/out/job.log``).

Who may do what is decided by the database (``docs/admin.md``): on PostgreSQL a researcher lists, shows and
cancels only their own campaigns (row-level security); another user's campaign reads as ``no campaign N``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import click

from infrarsi.controller.campaign.trialspec import trial_dirs
from infrarsi.controller.cli.output import emit, emit_obj
from infrarsi.controller.contract.launch import config_string
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.store import open_store
from infrarsi.controller.store.records import CampaignRecord


def _get(campaign_id: int) -> tuple[object, CampaignRecord]:
    store = open_store()
    try:
        return store, store.get_campaign(campaign_id)
    except KeyError as exc:
        raise InfrarsiError(str(exc.args[0])) from None


def _status(store: object, c: CampaignRecord) -> dict:
    trials = store.list_trials(c.id)  # type: ignore[attr-defined]
    by: dict[str, int] = {}
    for t in trials:
        key = t.outcome or t.status
        by[key] = by.get(key, 0) + 1
    cost = store.cost_by_stage(c.id)  # type: ignore[attr-defined]
    gpu_h = sum(r["gpu_hours"] for r in cost)
    cpu_h = sum(r.get("cpu_hours", 0.0) for r in cost)  # CPU trials: booked as CPU-hours, never GPU-hours
    search = sum(1 for t in trials if t.stage == "search")
    return {"id": c.id, "name": c.name, "owner": c.owner, "state": c.state, "executor": c.executor,
            "trials": len(trials), "search_trials": f"{search}/{c.budget_trials}",
            "gpu_hours": f"{gpu_h:.4f}/{c.budget_gpu_hours:g}" if not cpu_h else f"{gpu_h:.4f}",
            **({"cpu_hours": f"{cpu_h:.4f}/{c.budget_gpu_hours:g}"} if cpu_h else {}),
            **({"sbatch": c.sbatch} if c.sbatch else {}), "outcomes": by,
            "delivered_speedup": c.delivered_speedup, "error": c.error, "workdir": c.workdir}


@click.group()
def campaign() -> None:
    """Inspect, watch and cancel tuning campaigns."""


@campaign.command("list")
@click.option("--state", "states", multiple=True, help="Only campaigns in this state (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(states: tuple[str, ...], as_json: bool) -> None:
    """List campaigns, newest first."""
    rows = [{"id": c.id, "name": c.name, "owner": c.owner, "state": c.state, "executor": c.executor,
             "speedup": c.delivered_speedup, "created": c.created_at}
            for c in open_store().list_campaigns(list(states) or None)]
    emit(rows, "json" if as_json else "table")


def _contract_or_none(c: Any) -> Contract | None:
    """The campaign's stored contract (for rendering knob values as they were passed), None if unreadable."""
    from infrarsi.controller.campaign.engine import parse_contract_yaml

    try:
        return parse_contract_yaml(c.contract_yaml)
    except Exception:  # an old or damaged record: show values as stored
        return None


@campaign.command("show")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True)
def show(campaign_id: int, as_json: bool) -> None:
    """Show a campaign with its trials."""
    store, c = _get(campaign_id)
    emit_obj(_status(store, c), as_json)
    if not as_json:
        obs = store.observations(c.id)  # type: ignore[attr-defined]
        contract = _contract_or_none(c)
        rows = [{"seq": t.seq, "dir": trial_dir_name(t.trial_key), "stage": t.stage, "status": t.status,
                 "outcome": t.outcome, "job": t.job_id,
                 "ms": (obs[t.id].step_time_s * 1000) if t.id in obs and obs[t.id].step_time_s else None,
                 "knobs": (config_string(contract, t.config, ",") if contract is not None
                           else ",".join(f"{k}={v}" for k, v in sorted(t.config.items()))),
                 "patches": "+".join(t.patches), "reason": short_reason(t.reason)}
                for t in store.list_trials(c.id)]  # type: ignore[attr-defined]
        click.echo("")
        emit(rows)
        if rows:
            click.echo(f"\ntrial files: {c.workdir}/trials/<dir>/out/ (job.log, receipt.json)")


def trial_dir_name(trial_key: str) -> str:
    """The trial's directory name under ``<workdir>/trials/`` (see ``campaign.trialspec.trial_dirs``)."""
    return trial_dirs(Path("/"), trial_key)[0].parent.name


def short_reason(reason: str | None, limit: int = 120) -> str:
    """A trial's reason for a table cell: the log path dropped (the DIR column names it), cut to ``limit``."""
    r = re.sub(r" \(log: [^)]*\)$", "", reason or "")
    return r if len(r) <= limit else r[:limit - 3] + "..."


@campaign.command("status")
@click.argument("campaign_id", type=int)
@click.option("--json", "as_json", is_flag=True)
def status(campaign_id: int, as_json: bool) -> None:
    """One-screen status of a campaign."""
    store, c = _get(campaign_id)
    emit_obj(_status(store, c), as_json)


@campaign.command("watch")
@click.argument("campaign_id", type=int)
@click.option("--interval", type=float, default=2.0, show_default=True)
@click.option("--timeout", type=float, default=None, help="Stop watching after this many seconds.")
def watch(campaign_id: int, interval: float, timeout: float | None) -> None:
    """Print a campaign's events as they happen until it ends."""
    store, c = _get(campaign_id)
    seen = 0
    start = time.monotonic()
    while True:
        for e in store.events(campaign_id, limit=10_000)[seen:]:  # type: ignore[attr-defined]
            seen += 1
            p = e["payload"] or {}
            detail = " ".join(f"{k}={v}" for k, v in p.items() if k in ("outcome", "reason", "to", "stage", "job_id"))
            click.echo(f"{e['at']:%H:%M:%S} {e['kind']:<18} {detail}")
        c = store.get_campaign(campaign_id)  # type: ignore[attr-defined]
        if c.terminal or (timeout is not None and time.monotonic() - start > timeout):
            s = _status(store, c)
            click.echo(f"campaign {c.id}: {c.state}; trials {s['trials']}; speedup {c.delivered_speedup}")
            return
        time.sleep(interval)


@campaign.command("cancel")
@click.argument("campaign_id", type=int)
def cancel(campaign_id: int) -> None:
    """Cancel a campaign and its running jobs (Slurm jobs included); recorded trials are kept.

    On PostgreSQL this goes through the database's one narrow path, ``infrarsi_cancel_campaign`` (the owner or an
    admin only; anyone else is told there is no such campaign), and the daemon stops the campaign's jobs.  On the
    embedded SQLite store the jobs are stopped here and the command waits for them to be accounted."""
    from infrarsi.controller.settings import Settings

    store = open_store()
    if store.dialect == "postgresql":
        try:
            after = store.cancel_campaign(campaign_id)
        except KeyError as exc:
            raise InfrarsiError(str(exc.args[0])) from None
        click.echo(f"campaign {after.id}: {after.state}" + ("" if after.state != "cancelled" or
                   not store.live_trials([after.id]) else " (the daemon stops its running jobs)"))
        return
    from infrarsi.controller.campaign.engine import CampaignEngine
    from infrarsi.controller.campaign.runner import executor_factory

    _, c = _get(campaign_id)
    settings = Settings.from_env()
    engine = CampaignEngine(store, settings, executor_factory(settings))
    after = engine.cancel(campaign_id, reason=f"cancelled by {store.identity()}")
    click.echo(f"campaign {after.id}: {after.state}")
