"""``infrarsi finops``: the finance views as tables, JSON or CSV.

Works as the read-only finance role of ``deploy/finops-role.sql``: on PostgreSQL it reads the ``finops_*`` view
and nothing else (no ``alembic_version``, no table), so it does not check the schema revision; a missing view or
a missing grant is one line saying what to run.  The embedded SQLite store is opened (and upgraded) as usual.
"""

from __future__ import annotations

import click
from sqlalchemy.exc import DBAPIError

from infrarsi.controller.cli.output import emit
from infrarsi.controller.errors import StoreError, one_line
from infrarsi.controller.redact import redact_text, redact_url
from infrarsi.controller.store import SqlStore, open_store
from infrarsi.controller.store.migrate import parse_url
from infrarsi.controller.store.sql import FINOPS_VIEWS


def finops_rows(url: str, view: str) -> list[dict]:
    """The rows of finance view ``view`` (a key of FINOPS_VIEWS) at ``url``; StoreError (one line) otherwise."""
    parse_url(url)
    if url.startswith("sqlite"):
        return open_store(url).finops(view)
    store = SqlStore(url)
    try:
        return store.finops(view)
    except DBAPIError as exc:
        msg = one_line(redact_text(str(getattr(exc, "orig", None) or exc)))
        where = redact_url(url)
        if "does not exist" in msg:
            raise StoreError(f"view {FINOPS_VIEWS[view]} is missing in {where}: the schema owner must run "
                             f"'infrarsi db upgrade'") from None
        if "permission denied" in msg:
            raise StoreError(f"this role may not read {FINOPS_VIEWS[view]} in {where}: grant it with "
                             f"deploy/finops-role.sql") from None
        raise StoreError(f"cannot read {FINOPS_VIEWS[view]} in {where}: {msg}") from None
    finally:
        store.engine.dispose()


@click.command()
@click.argument("view", type=click.Choice(sorted(FINOPS_VIEWS)), default="campaign_cost")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--url", help="Database URL (default: INFRARSI_DATABASE_URL or SQLite under INFRARSI_HOME).")
def finops(view: str, fmt: str, url: str | None) -> None:
    """Print a finance view: failed (failed-trial GPU-hours by campaign, user, partition, stage, failure class),
    campaign_cost (total cost per campaign, failures included), cost_per_pct (GPU-hours per verified % speedup),
    llm_cost (language-model requests, tokens and USD next to GPU-hours), proposer_cost (the same per proposer)."""
    from infrarsi.controller.settings import Settings, normalize_url

    emit(finops_rows(normalize_url(url) if url else Settings.from_env().database_url, view), fmt)
