"""Run Alembic revisions programmatically (``infrarsi db upgrade|current|downgrade``).

Contract: every failure a user can cause -- a malformed URL, a scheme without a driver, an unreachable server,
a garbage SQLite file, a database at a revision this version does not know, an unknown target revision, a schema
that no infrarsi revision created, a role without the needed privileges -- raises
:class:`~infrarsi.controller.errors.StoreError` with one line that names the (password-masked) URL and the
problem.  Passwords never appear in a message (:mod:`infrarsi.controller.redact`).  A failed upgrade on
PostgreSQL rolls back as a whole (transactional DDL in one transaction).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from infrarsi import migrations
from infrarsi.controller.errors import StoreError, one_line
from infrarsi.controller.redact import redact_text, redact_url

#: seconds to wait for a PostgreSQL server before calling it unreachable
CONNECT_TIMEOUT_S = 10


def alembic_config(url: str) -> Config:
    """An Alembic Config pointing at the packaged ``migrations`` directory, for ``url``."""
    here = Path(migrations.__file__).parent
    cfg = Config(str(here / "alembic.ini"))
    cfg.set_main_option("script_location", str(here))
    cfg.attributes["url"] = url
    return cfg


def safe_url(url: str) -> str:
    """``url`` with any password masked, for messages (see :func:`infrarsi.controller.redact.redact_url`)."""
    return redact_url(url)


def known_revisions() -> list[str]:
    """Every revision this version ships, oldest first."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head_revision() -> str:
    """The newest revision shipped with this version of infrarsi."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    head = script.get_current_head()
    assert head is not None
    return head


def parse_url(url: str) -> URL:
    """The parsed ``url``; StoreError naming it (masked) when malformed or when no driver handles its scheme."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        raise StoreError(f"malformed database URL '{one_line(redact_url(url), 200)}': expected "
                         f"postgresql://user@host:port/dbname or sqlite:///path/to/file.sqlite") from None
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError, AttributeError, ValueError):
        raise StoreError(f"unsupported database URL scheme '{one_line(parsed.drivername, 80)}' in "
                         f"'{one_line(redact_url(url), 200)}': use postgresql:// or sqlite:///") from None
    return parsed


def _message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return one_line(redact_text(str(orig))) or type(orig).__name__


@contextlib.contextmanager
def _errors(url: str, action: str) -> Iterator[None]:
    """Turn every database/driver/Alembic failure inside the block into one StoreError line."""
    where = one_line(redact_url(url), 200)
    try:
        yield
    except StoreError:
        raise
    except CommandError as exc:
        raise StoreError(f"cannot {action} {where}: {_message(exc)} "
                         f"(known revisions: base, {', '.join(known_revisions())}, head)") from None
    except DBAPIError as exc:
        msg = _message(exc)
        if "file is not a database" in msg or "not a database" in msg:
            raise StoreError(f"cannot {action} {where}: the file is not an SQLite database") from None
        if "already exists" in msg:
            raise StoreError(f"cannot {action} {where}: {msg} (the database holds tables no infrarsi revision "
                             f"created; use an empty database)") from None
        if "permission denied" in msg:
            raise StoreError(f"cannot {action} {where}: {msg} (this role lacks the privilege; "
                             f"use the schema owner's role)") from None
        raise StoreError(f"cannot {action} {where}: {msg}") from None
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot {action} {where}: {_message(exc)}") from None
    except OSError as exc:
        raise StoreError(f"cannot {action} {where}: {one_line(redact_text(str(exc)))}") from None
    except UnicodeError as exc:
        raise StoreError(f"cannot {action} {where}: {_message(exc)}") from None


def _engine(url: str) -> Engine:
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if db and db != ":memory:" and not db.startswith("file:"):
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        return create_engine(parsed, connect_args={"timeout": 30})
    if parsed.get_backend_name() == "postgresql":
        return create_engine(parsed, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    return create_engine(parsed)


def _check_known(url: str, rev: str | None) -> None:
    if rev is not None and rev not in known_revisions():
        raise StoreError(f"database {one_line(redact_url(url), 200)} is at revision '{one_line(rev, 80)}', which "
                         f"this version of infrarsi does not know (newest here: {head_revision()}); "
                         f"was it migrated by a newer infrarsi?")


def _migrate(url: str, action: str, fn: Any, revision: str) -> None:
    known = f"known revisions: base, {', '.join(known_revisions())}, head"
    if not revision.strip():
        raise StoreError(f"cannot {action} {one_line(redact_url(url), 200)}: the target revision is empty ({known})")
    try:  # Alembic asserts on some malformed names ('@'); relative ones ('+1') only resolve against a database
        ScriptDirectory.from_config(alembic_config(url)).get_revisions(revision)
    except CommandError:
        pass
    except Exception:
        raise StoreError(f"cannot {action} {one_line(redact_url(url), 200)}: '{one_line(revision, 80)}' is not a "
                         f"revision ({known})") from None
    with _errors(url, action):
        engine = _engine(url)
        try:
            with engine.begin() as conn:
                _check_known(url, MigrationContext.configure(conn).get_current_revision())
                cfg = alembic_config(url)
                cfg.attributes["connection"] = conn
                fn(cfg, revision)
        finally:
            engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision``; StoreError (one line) on any failure, nothing half-done on
    PostgreSQL (one transaction)."""
    _migrate(url, "migrate", command.upgrade, revision)


def downgrade(url: str, revision: str) -> None:
    """Downgrade the database at ``url`` to ``revision`` (``base`` drops everything); StoreError (one line)."""
    _migrate(url, "downgrade", command.downgrade, revision)


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None when never migrated); StoreError (one line) when the URL is
    malformed, the server unreachable or the file not a database."""
    with _errors(url, "reach"):
        engine = _engine(url)
        try:
            with engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        finally:
            engine.dispose()
