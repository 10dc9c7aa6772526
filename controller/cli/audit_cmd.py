"""``infrarsi audit``: who did what, when, from the append-only ``events`` table.

Each event carries its ``actor`` (migration 0004): the database session user on PostgreSQL (set by a trigger, so
a client cannot forge it), the OS user on the embedded SQLite store.  What a person sees is what the database lets
their role see: a researcher the events of their own campaigns (and their own events without a campaign), an admin
or the daemon everything (``docs/admin.md``).  By default only the actions people take are shown (submit, cancel,
register, apply and state changes); ``--all`` adds the daemon's trial bookkeeping.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import click

from infrarsi.controller.cli.output import emit
from infrarsi.controller.store import open_store
from infrarsi.controller.store.records import AuditEvent

#: event kinds that record a decision (by a person, or the daemon moving a campaign's state)
PERSON_KINDS = ("campaign.created", "campaign.state", "campaign.applied", "workload.registered")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """``2h``, ``30m``, ``7d``, ``1w`` (ago) or an ISO date/time (UTC unless it names a zone) -> aware datetime.

    Raises ValueError with a one-line message naming the value otherwise."""
    now = now or datetime.now(timezone.utc)
    rel = _RELATIVE.match(value)
    if rel:
        return now - timedelta(seconds=float(rel.group(1)) * _UNIT_S[rel.group(2)])
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is neither a duration like 2h, 30m, 7d nor an ISO time like 2026-12-01T09:00")
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _detail(e: AuditEvent) -> str:
    p: dict[str, Any] = e.payload or {}
    if e.kind == "campaign.state":
        text = f"{p.get('from')} -> {p.get('to')}"
        return text + (f" ({p['error']})" if p.get("error") else "")
    keys = ("name", "digest", "outcome", "reason", "branch", "files", "job_id", "stage")
    return " ".join(f"{k}={p[k]}" for k in keys if p.get(k) not in (None, "", []))[:120]


@click.command()
@click.option("--campaign", "campaign_id", type=int, help="Only this campaign's events.")
@click.option("--user", help="Only events by this database role (or OS user on SQLite).")
@click.option("--since", callback=_since, help="Only events after this: 2h, 30m, 7d, or an ISO time (UTC).")
@click.option("--kind", "kinds", multiple=True, help="Only these event kinds (repeatable).")
@click.option("--all", "everything", is_flag=True, help="Every event, the daemon's trial bookkeeping included.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True, help="The newest N events.")
@click.option("--json", "as_json", is_flag=True)
def audit(campaign_id: int | None, user: str | None, since: datetime | None, kinds: tuple[str, ...],
          everything: bool, limit: int, as_json: bool) -> None:
    """Show who did what and when (submit, cancel, register, apply, state changes), oldest first."""
    store = open_store()
    wanted = list(kinds) or (None if everything else list(PERSON_KINDS))
    events = store.audit(campaign_id=campaign_id, actor=user, since=since, kinds=wanted, limit=limit)
    if as_json:
        emit([{"id": e.id, "at": e.at, "actor": e.actor, "kind": e.kind, "campaign_id": e.campaign_id,
               "trial_id": e.trial_id, "payload": e.payload} for e in events], "json")
        return
    emit([{"id": e.id, "at": e.at, "actor": e.actor, "campaign": e.campaign_id, "kind": e.kind,
           "detail": _detail(e)} for e in events])
