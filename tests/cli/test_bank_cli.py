"""``infrarsi bank`` end to end through the CLI: export from SQLite, import into PostgreSQL and back (JSON and
YAML), idempotent re-import, list/show, prune by SKU, age and campaign, and one-line refusals."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.store import open_store
from tests.campaign.helpers import cli_env, infrarsi

H20 = Environment(gpu_sku="H20", gpu_mem_gib=96.0, gpus_per_node=8, nodes=1, interconnect="nvlink",
                  framework="torch", model_family="gpt", params=7e9, seq_len=4096, parallel="tp1-pp1-dp8",
                  reference_state={"low_precision_gemm": "off", "tensor_parallel": "1"})
H100 = Environment(gpu_sku="H100", gpu_mem_gib=80.0, gpus_per_node=8, nodes=1, framework="torch", model_family="gpt")
OLD = datetime(2024, 1, 1, tzinfo=timezone.utc)
NEEDS = ((("low_precision_gemm", "on"), ("tensor_parallel", "2")),)  # a stored "needs a partner" explanation


def _seed(url: str) -> None:
    store = open_store(url, auto_upgrade=True)
    store.add_environment(H20)
    store.add_observations([Observation(environment=H20.digest(), campaign="gpt#1", trial="t1",
                                        config={"fp8": True}, canonical={"low_precision_gemm": "on"},
                                        step_time_s=0.8, verdicts={"outcome": "ok"}, requirements=NEEDS)])
    store.add_effects([
        Effect(environment=H20.digest(), mechanism="low_precision_gemm", value="on", klass="kernel", log_speedup=0.22,
               noise_floor=0.01, conditioning={}, tier="verified-search", campaign="gpt#1", trial="t1", knob="fp8",
               raw_value="true", env=H20),
        Effect(environment=H20.digest(), mechanism="tensor_parallel", value="2", klass="balance", log_speedup=0.1,
               noise_floor=0.01, conditioning={"low_precision_gemm": "on"}, tier="verified-rerun", campaign="gpt#1",
               trial="promotion", env=H20),
        Effect(environment=H100.digest(), mechanism="low_precision_gemm", value="on", klass="kernel",
               log_speedup=-0.15, noise_floor=0.02, conditioning={}, tier="verified-search", campaign="gpt#2",
               trial="t7", env=H100, created_at=OLD),
    ])
    store.engine.dispose()


def _rows(url: str, env: dict) -> list[tuple]:
    rows = json.loads(infrarsi("bank", "list", "--json", "--db", url, env=env).stdout)
    return sorted((r["mechanism"], r["value"], r["class"], round(r["log_speedup"], 9), r["tier"], r["sku"],
                   r["campaign"], r["conditioning"]) for r in rows)


@pytest.mark.postgres
@pytest.mark.slow
def test_export_import_round_trip_sqlite_postgres(tmp_path: Path, pg_url: str) -> None:
    env = cli_env(tmp_path / "home")
    lite = f"sqlite:///{tmp_path / 'a.sqlite'}"
    _seed(lite)
    infrarsi("db", "upgrade", env={**env, "INFRARSI_DATABASE_URL": pg_url})
    want = _rows(lite, env)
    assert len(want) == 3

    out = infrarsi("bank", "export", str(tmp_path / "p.json"), "--db", lite, "--source", "cluster-a", env=env).stdout
    assert "exported 3 effects, 1 observations, 2 environments" in out
    assert "imported 3 new effects, 1 new observations" in infrarsi(
        "bank", "import", str(tmp_path / "p.json"), "--db", pg_url, env=env).stdout
    assert _rows(pg_url, env) == want
    assert "imported 0 new effects, 0 new observations" in infrarsi(  # idempotent
        "bank", "import", str(tmp_path / "p.json"), "--db", pg_url, env=env).stdout
    assert _rows(pg_url, env) == want

    back = f"sqlite:///{tmp_path / 'b.sqlite'}"
    infrarsi("db", "upgrade", env={**env, "INFRARSI_DATABASE_URL": back})
    infrarsi("bank", "export", str(tmp_path / "p.yaml"), "--db", pg_url, env=env)
    infrarsi("bank", "import", str(tmp_path / "p.yaml"), "--db", back, env=env)
    assert _rows(back, env) == want
    pg = open_store(pg_url)
    (o,) = pg.experience_observations()
    assert (o.campaign, o.config, o.canonical) == ("gpt#1", {"fp8": True}, {"low_precision_gemm": "on"})
    assert o.requirements == NEEDS
    assert pg.environments()[H20.digest()] == H20
    pg.engine.dispose()
    lite_back = open_store(back)
    assert [x.requirements for x in lite_back.experience_observations()] == [NEEDS]
    lite_back.engine.dispose()

    # filters, show, prune
    only = json.loads(infrarsi("bank", "list", "--json", "--db", pg_url, "--mechanism", "fp8", "--sku", "H100",
                               env=env).stdout)
    assert [(r["mechanism"], r["sku"]) for r in only] == [("low_precision_gemm", "H100")]
    show = json.loads(infrarsi("bank", "show", "fp8", "--json", "--db", pg_url, env=env).stdout)
    assert show["mechanism"] == "low_precision_gemm" and show["class"] == "kernel" and show["in_catalog"]
    assert show["values"][0]["records"] == 2 and show["values"][0]["skus"] == ["H100", "H20"]
    assert "would prune 1 effects" in infrarsi("bank", "prune", "--older-than", "365d", "--dry-run", "--db", pg_url,
                                               env=env).stdout
    assert "pruned 1 effects" in infrarsi("bank", "prune", "--sku", "H100", "--db", pg_url, env=env).stdout
    assert "pruned 2 effects, 1 observations, 1 environments" in infrarsi(
        "bank", "prune", "--campaign", "gpt#1", "--db", pg_url, env=env).stdout
    assert _rows(pg_url, env) == []


def test_refusals_are_one_line(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home")
    lite = f"sqlite:///{tmp_path / 'a.sqlite'}"
    _seed(lite)
    bad = tmp_path / "bad.json"
    doc = json.loads(infrarsi("bank", "export", "-", "--db", lite, env=env).stdout)
    doc["version"] = 7
    bad.write_text(json.dumps(doc))
    out = infrarsi("bank", "import", str(bad), "--db", lite, env=env, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert f"infrarsi: error: {bad}: version 7 is not supported" in out.stderr
    out = infrarsi("bank", "prune", "--db", lite, env=env, check=False)
    assert out.returncode == 2 and "at least one of --older-than, --sku, --campaign" in out.stderr
    out = infrarsi("bank", "prune", "--older-than", "soon", "--db", lite, env=env, check=False)
    assert out.returncode == 2 and "'soon' is neither a duration" in out.stderr
    out = infrarsi("bank", "show", "warp_drive", "--db", lite, env=env, check=False)
    assert out.returncode == 2 and "no mechanism 'warp_drive'" in out.stderr
    assert len(json.loads(infrarsi("bank", "list", "--json", "--db", lite, env=env).stdout)) == 3  # nothing lost
