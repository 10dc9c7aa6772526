"""``infrarsi audit`` on the embedded SQLite store: the OS user (never LOGNAME) is the owner and the actor."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from infrarsi.controller.cli.audit_cmd import parse_since
from infrarsi.controller.settings import os_user
from tests.campaign.helpers import cli_env, infrarsi


def test_audit_shows_who_did_what_on_sqlite(tmp_path: Path, toy_repo: Path) -> None:
    env = cli_env(tmp_path / "home", LOGNAME="mallory", USER="mallory")
    me = os_user()
    assert me != "mallory"
    contract = str(toy_repo / "infrarsi.yaml")
    assert f"owner {me}" in infrarsi("submit", contract, "--executor", "local", env=env).stdout
    infrarsi("submit", contract, "--executor", "local", env=env)
    assert "campaign 1: cancelled" in infrarsi("campaign", "cancel", "1", env=env).stdout
    infrarsi("workload", "register", contract, env=env)
    (w,) = json.loads(infrarsi("workload", "list", "--json", env=env).stdout)
    assert w["owner"] == me

    trail = json.loads(infrarsi("audit", "--json", env=env).stdout)
    assert [(e["actor"], e["kind"], e["campaign_id"]) for e in trail] == [
        (me, "campaign.created", 1), (me, "campaign.created", 2), (me, "campaign.state", 1),
        (me, "workload.registered", None)]
    assert trail[2]["payload"] == {"from": "init", "to": "cancelled", "error": f"cancelled by {me}"}
    assert [e["kind"] for e in json.loads(infrarsi("audit", "--json", "--campaign", "1", env=env).stdout)] == [
        "campaign.created", "campaign.state"]
    assert json.loads(infrarsi("audit", "--json", "--user", "mallory", env=env).stdout) == []
    assert len(json.loads(infrarsi("audit", "--json", "--since", "1h", env=env).stdout)) == 4
    future = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert json.loads(infrarsi("audit", "--json", "--since", future, env=env).stdout) == []
    table = infrarsi("audit", env=env).stdout.splitlines()
    assert table[0].split() == ["ID", "AT", "ACTOR", "CAMPAIGN", "KIND", "DETAIL"]
    assert "init -> cancelled" in table[3] and me in table[3]


def test_audit_bad_since_is_one_line(tmp_path: Path) -> None:
    out = infrarsi("audit", "--since", "yesterday-ish", env=cli_env(tmp_path / "home"), check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "'yesterday-ish' is neither a duration" in out.stderr


def test_parse_since() -> None:
    now = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("1.5d", now) == now - timedelta(hours=36)
    assert parse_since("2026-12-01", now) == datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert parse_since("2026-12-01T10:00+02:00", now).utcoffset() == timedelta(hours=2)
    with pytest.raises(ValueError, match="'-2h' is neither"):
        parse_since("-2h", now)
