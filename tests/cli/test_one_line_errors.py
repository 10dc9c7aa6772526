"""Every verb fails with exactly one stderr line and a non-zero exit, never a traceback, never a password.

Most cases run the real entry point (``infrarsi.controller.cli.main.main``) in-process; a few run the installed
CLI in a subprocess to prove the same holds end to end.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import uuid
from pathlib import Path

import click
import pytest

from infrarsi.controller.cli import main as cli_main
from infrarsi.controller.redact import redact_text, redact_url
from infrarsi.controller.store import migrate
from tests.campaign.helpers import cli_env, infrarsi

SECRET = "Pw-" + uuid.uuid4().hex


def run(*argv: str) -> tuple[int, str, str]:
    """``infrarsi argv...`` in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_one_line(code: int, out: str, err: str, *fragments: str) -> None:
    assert code != 0, (out, err)
    assert err.count("\n") == 1 and err.startswith("infrarsi: "), err
    assert "Traceback" not in err + out and SECRET not in err + out, err
    for f in fragments:
        assert f in err, (f, err)


@pytest.mark.parametrize("url,fragment", [
    (f"postgresql://u:{SECRET}@127.0.0.1:1/x", "postgresql+psycopg://u:***@127.0.0.1:1/x"),
    (f"postgresql://u@127.0.0.1:1/x?password={SECRET}", "?password=***"),
    (f"postgresql://u@127.0.0.1:1/x?sslmode=disable&password={SECRET}", "&password=***"),
    (f"postgresql://u:{SECRET}@127.0.0.1:notaport/x", "u:***@"),
    ("not a url", "malformed database URL"),
    (f"mysql://u:{SECRET}@127.0.0.1/x", "unsupported database URL scheme 'mysql'"),
    (f"foo://u:{SECRET}@h/x", "unsupported database URL scheme 'foo'"),
])
@pytest.mark.parametrize("verb", ["upgrade", "current"])
def test_db_bad_urls(verb: str, url: str, fragment: str) -> None:
    assert_one_line(*run("db", verb, "--url", url), fragment)


def test_db_garbage_sqlite_file(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"\x00not sqlite at all\xff" * 200)
    for verb in ("upgrade", "current"):
        assert_one_line(*run("db", verb, "--url", f"sqlite:///{garbage}"), "not an SQLite database")
    assert garbage.read_bytes() == b"\x00not sqlite at all\xff" * 200  # nothing written


def test_db_unknown_and_foreign_revisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert_one_line(*run("db", "upgrade", "--revision", "9999", "--url", url), "9999", "known revisions: base")
    code, out, err = run("db", "upgrade", "--url", url)
    assert code == 0 and f"at revision {migrate.head_revision()}" in out and err == ""
    with sqlite3.connect(tmp_path / "db.sqlite") as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'zzz9'")
    assert_one_line(*run("db", "upgrade", "--url", url), "revision 'zzz9'", "does not know")
    code, out, _ = run("db", "current", "--url", url)
    assert code == 0 and "unknown to this version" in out


def test_db_foreign_schema(tmp_path: Path) -> None:
    path = tmp_path / "foreign.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE workloads (x INTEGER)")
        conn.execute("INSERT INTO workloads VALUES (42)")
    assert_one_line(*run("db", "upgrade", "--url", f"sqlite:///{path}"), "already exists", "empty database")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT x FROM workloads").fetchall() == [(42,)]  # nothing lost


@click.command()
def _boom() -> None:
    raise RuntimeError(f"kaputt\nsecond line postgresql://u:{SECRET}@h/db")


def test_unexpected_exception_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli_main.COMMANDS, "boom", f"{__name__}:_boom")
    code, out, err = run("boom")
    assert_one_line(code, out, err, "infrarsi: internal error: RuntimeError: kaputt", "INFRARSI_DEBUG=1")
    assert code == cli_main.INTERNAL_ERROR_EXIT
    monkeypatch.setenv("INFRARSI_DEBUG", "1")
    code, out, err = run("boom")
    assert code == cli_main.INTERNAL_ERROR_EXIT and "Traceback" in err and SECRET not in err
    assert err.rstrip("\n").splitlines()[-1].startswith("infrarsi: internal error: RuntimeError: kaputt")


@pytest.mark.parametrize("argv,fragment", [
    (("contract", "check"), "Missing argument"),
    (("db", "upgrade", "--nope"), "No such option"),
    (("finops", "nonsense"), "Invalid value"),
    (("no-such-verb",), "No such command"),
    (("campaign", "show", "notanint"), "is not a valid integer"),
])
def test_usage_errors_are_one_line(argv: tuple[str, ...], fragment: str) -> None:
    assert_one_line(*run(*argv), fragment, "--help")


def test_redaction() -> None:
    assert redact_url(f"postgresql://u:{SECRET}@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url(f"postgresql://u:p@{SECRET}@h/db") == "postgresql://u:***@h/db"  # '@' in a password
    assert redact_url("postgresql://h:5432/db") == "postgresql://h:5432/db"  # a port is not a password
    assert redact_url("sqlite:////tmp/a@b.sqlite") == "sqlite:////tmp/a@b.sqlite"
    for text in (f"host=h password={SECRET} user=u", f"host=h password='{SECRET} x' user=u",
                 f"PGPASSWORD={SECRET} psql", f"x?password={SECRET}&a=1", f"(postgresql://:{SECRET}@h)",
                 f'password = "{SECRET}"'):
        assert SECRET not in redact_text(text), text
    assert "user=u" in redact_text(f"host=h password={SECRET} user=u")


def test_subprocess_cli_stays_one_line(tmp_path: Path) -> None:
    """The real console entry point, end to end: a garbage database file and a password-bearing unreachable URL."""
    garbage = tmp_path / "g.sqlite"
    garbage.write_bytes(b"garbage" * 100)
    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=f"postgresql://u:{SECRET}@127.0.0.1:1/x")
    for args in (("db", "upgrade", "--url", f"sqlite:///{garbage}"), ("campaign", "list"), ("finops",)):
        p = infrarsi(*args, env=env, check=False)
        assert_one_line(p.returncode, p.stdout, p.stderr)
