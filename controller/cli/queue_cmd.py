"""``infrarsi queue``: my campaigns and their running trials, like ``squeue --me``.

One row per open campaign of yours (the owner is who you are to the database: your PostgreSQL role, or your OS
user on SQLite): state, trials running / done / searched of budget, GPU-hours (and CPU-hours for CPU trials), and
the scheduler job ids of its running trials.  ``--trials`` adds one row per running trial (job id, campaign,
trial directory, stage, status, time since submit, partition).  ``--all`` shows every owner's campaigns the
database lets you see (admins: all of them; researchers: still only their own, by row-level security);
``--finished`` includes campaigns that ended.
"""

from __future__ import annotations

import time
from typing import Any

import click

from infrarsi.controller.cli.campaign_cmd import trial_dir_name
from infrarsi.controller.cli.output import emit
from infrarsi.controller.store import open_store
from infrarsi.controller.store.records import CampaignRecord, TrialRecord

#: trial statuses that hold (or are about to hold) a scheduler job
LIVE = ("intent", "submitted")
MAX_JOBS_SHOWN = 6


def _elapsed(since: float | None, now: float) -> str:
    """``[D-]HH:MM:SS`` since ``since`` (unix seconds), as squeue prints TIME; ``-`` when unknown."""
    if since is None:
        return "-"
    s = max(0, int(now - since))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def campaign_row(store: Any, c: CampaignRecord, trials: list[TrialRecord]) -> dict[str, Any]:
    """One queue row of campaign ``c`` given its trials."""
    live = [t for t in trials if t.status in LIVE]
    done = sum(1 for t in trials if t.status in ("finished", "ingested"))
    search = sum(1 for t in trials if t.stage == "search")
    cost = store.cost_by_stage(c.id)
    gpu_h = sum(r["gpu_hours"] for r in cost)
    cpu_h = sum(r.get("cpu_hours", 0.0) for r in cost)
    jobs = [t.job_id for t in live if t.job_id]
    shown = ",".join(jobs[:MAX_JOBS_SHOWN]) + (f",+{len(jobs) - MAX_JOBS_SHOWN}" if len(jobs) > MAX_JOBS_SHOWN else "")
    return {"campaign": c.id, "name": c.name, "owner": c.owner, "state": c.state, "executor": c.executor,
            "partition": c.partition, "running": len(live), "done": done,
            "searched": f"{search}/{c.budget_trials}", "gpu_h": round(gpu_h, 4), "cpu_h": round(cpu_h, 4),
            "jobs": shown or "-"}


def trial_row(c: CampaignRecord, t: TrialRecord, now: float) -> dict[str, Any]:
    """One ``--trials`` row: a running trial of campaign ``c``."""
    return {"jobid": t.job_id or "-", "campaign": c.id, "dir": trial_dir_name(t.trial_key), "stage": t.stage,
            "seq": t.seq, "status": t.status, "time": _elapsed(t.start_time or t.submit_time, now),
            "partition": t.partition or c.partition}


@click.command("queue")
@click.option("--all", "all_owners", is_flag=True, help="Every owner's campaigns (as far as the database lets you see).")
@click.option("--finished", is_flag=True, help="Include campaigns that ended (done, failed, cancelled).")
@click.option("--trials", is_flag=True, help="Also list each running trial (job id, trial directory, stage, time).")
@click.option("--json", "as_json", is_flag=True)
def queue_cmd(all_owners: bool, finished: bool, trials: bool, as_json: bool) -> None:
    """List my campaigns and their running trials, like squeue --me (--all for admins)."""
    import json

    store = open_store()
    me = store.identity()
    now = time.time()
    camps = [c for c in store.list_campaigns() if (all_owners or c.owner == me) and (finished or not c.terminal)]
    rows, trows = [], []
    for c in sorted(camps, key=lambda c: c.id):
        ts = store.list_trials(c.id)
        rows.append(campaign_row(store, c, ts))
        trows += [trial_row(c, t, now) for t in ts if t.status in LIVE]
    if as_json:
        click.echo(json.dumps({"campaigns": rows, "trials": trows}, indent=2, default=str))
        return
    if not rows:
        who = "" if all_owners else f" of {me}"
        click.echo(f"no {'' if finished else 'open '}campaigns{who}")
        return
    emit(rows)
    if trials:
        click.echo("")
        emit(trows) if trows else click.echo("no running trials")
