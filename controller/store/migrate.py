"""Run Alembic revisions programmatically (``infrarsi db upgrade|current|downgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from infrarsi import migrations
from infrarsi.controller.errors import StoreError


def alembic_config(url: str) -> Config:
    """An Alembic Config pointing at the packaged ``migrations`` directory, for ``url``."""
    here = Path(migrations.__file__).parent
    cfg = Config(str(here / "alembic.ini"))
    cfg.set_main_option("script_location", str(here))
    cfg.attributes["url"] = url
    return cfg


def _ensure_sqlite_dir(url: str) -> None:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision``; StoreError (one line) when unreachable."""
    _ensure_sqlite_dir(url)
    try:
        command.upgrade(alembic_config(url), revision)
    except OperationalError as exc:
        raise StoreError(f"cannot migrate {safe_url(url)}: {str(exc.orig).strip().splitlines()[0]}") from None


def downgrade(url: str, revision: str) -> None:
    """Downgrade the database at ``url`` to ``revision`` (``base`` drops everything)."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest revision shipped with this version of infrarsi."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    head = script.get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None when never migrated)."""
    _ensure_sqlite_dir(url)
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        raise StoreError(f"cannot reach {safe_url(url)}: {str(exc.orig).strip().splitlines()[0]}") from None


def safe_url(url: str) -> str:
    """``url`` with any password masked, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url
