"""Admin, researcher and finance verbs against a real PostgreSQL database, and their one-line errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from infrarsi.controller.store.migrate import head_revision
from tests.campaign.helpers import cli_env, infrarsi


@pytest.mark.postgres
def test_db_workload_campaign_finops_verbs(tmp_path: Path, toy_repo: Path, pg_url: str) -> None:
    env = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL=pg_url)
    assert "revision none" in infrarsi("db", "current", env=env).stdout
    behind = infrarsi("campaign", "list", env=env, check=False)
    assert behind.returncode == 2 and "run 'infrarsi db upgrade'" in behind.stderr
    assert f"at revision {head_revision()}" in infrarsi("db", "upgrade", env=env).stdout
    assert "up to date" in infrarsi("db", "current", env=env).stdout

    contract = str(toy_repo / "infrarsi.yaml")
    reg = infrarsi("workload", "register", contract, "--partition", "cpu", "--max-concurrent", "2", env=env)
    assert "workload toy (id 1) registered" in reg.stdout
    (w,) = json.loads(infrarsi("workload", "list", "--json", env=env).stdout)
    assert (w["name"], w["partition"], w["max_concurrent"]) == ("toy", "cpu", 2)
    assert "speed" in infrarsi("workload", "show", "toy", env=env).stdout

    cid = int(infrarsi("submit", contract, "--executor", "local", "--workload", "toy", "--parsable", env=env).stdout)
    (c,) = json.loads(infrarsi("campaign", "list", "--json", env=env).stdout)
    assert (c["id"], c["state"], c["executor"]) == (cid, "init", "local")
    status = json.loads(infrarsi("campaign", "status", str(cid), "--json", env=env).stdout)
    assert status["search_trials"] == "0/4" and status["state"] == "init"
    assert "cancelled" in infrarsi("campaign", "cancel", str(cid), env=env).stdout
    rows = list(csv.DictReader(io.StringIO(infrarsi("finops", "campaign_cost", "--format", "csv", env=env).stdout)))
    assert rows[0]["campaign"] == "toy" and rows[0]["state"] == "cancelled" and float(rows[0]["gpu_hours"]) == 0.0
    assert json.loads(infrarsi("finops", "failed", "--format", "json", env=env).stdout) == []
    table = infrarsi("finops", "cost_per_pct", env=env).stdout
    assert table.splitlines()[0].split()[:3] == ["CAMPAIGN_ID", "CAMPAIGN", "OWNER"]


def test_bad_inputs_give_one_line_errors(tmp_path: Path, toy_repo: Path) -> None:
    env = cli_env(tmp_path / "home")
    broken = toy_repo / "broken.yaml"
    broken.write_text((toy_repo / "infrarsi.yaml").read_text().replace("reference: 1\n", "reference: 3\n", 1))
    out = infrarsi("workload", "register", str(broken), env=env, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "broken.yaml:" in out.stderr and "knobs[0].reference: '3' is not one of values [1, 2, 4]" in out.stderr
    gone = cli_env(tmp_path / "home", INFRARSI_DATABASE_URL="postgresql://postgres@127.0.0.1:1/nope")
    out = infrarsi("campaign", "list", env=gone, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "127.0.0.1:1" in out.stderr
    out = infrarsi("campaign", "show", "99", env=env, check=False)
    assert out.returncode == 2 and "no campaign 99" in out.stderr
