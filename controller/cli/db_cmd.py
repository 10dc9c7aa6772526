"""``infrarsi db upgrade|current|downgrade``.

Every failure (malformed URL, unreachable server, garbage SQLite file, unknown revision, a schema no infrarsi
revision created) is one ``infrarsi: error: ...`` line from :mod:`infrarsi.controller.store.migrate`; URLs are
printed with their password masked.
"""

from __future__ import annotations

import click

from infrarsi.controller.settings import Settings
from infrarsi.controller.store import migrate


def _url(url: str | None) -> str:
    from infrarsi.controller.settings import normalize_url

    return normalize_url(url) if url else Settings.from_env().database_url


@click.group()
def db() -> None:
    """Manage the database schema (Alembic)."""


@db.command("upgrade")
@click.option("--url", help="Database URL (default: INFRARSI_DATABASE_URL or SQLite under INFRARSI_HOME).")
@click.option("--revision", default="head", show_default=True)
def upgrade_cmd(url: str | None, revision: str) -> None:
    """Upgrade the schema to REVISION."""
    u = _url(url)
    migrate.upgrade(u, revision)
    click.echo(f"{migrate.safe_url(u)}: at revision {migrate.current_revision(u)}")


@db.command("downgrade")
@click.option("--url")
@click.argument("revision")
def downgrade_cmd(url: str | None, revision: str) -> None:
    """Downgrade the schema to REVISION (``base`` drops every table)."""
    u = _url(url)
    migrate.downgrade(u, revision)
    click.echo(f"{migrate.safe_url(u)}: at revision {migrate.current_revision(u) or 'base'}")


@db.command("current")
@click.option("--url")
def current_cmd(url: str | None) -> None:
    """Print the database's revision and the newest one this version ships."""
    u = _url(url)
    rev = migrate.current_revision(u)
    head = migrate.head_revision()
    if rev == head:
        state = "up to date"
    elif rev is not None and rev not in migrate.known_revisions():
        state = "unknown to this version of infrarsi: was it migrated by a newer one?"
    else:
        state = "behind: run 'infrarsi db upgrade'"
    click.echo(f"{migrate.safe_url(u)}: revision {rev or 'none'} (head {head}, {state})")
