"""``controller/campaign/artifacts.py`` directly (from the engine's ``report_inputs``): result.json, pack.yaml,
REPORT.md, and the engine's experience write-back, of a toy campaign run on the memory store and the in-process
executor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from infrarsi.controller.campaign.artifacts import build_result, promoted_diff, report_dir, write_artifacts
from tests.campaign.engine_world import finished_campaign


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory):
    _, eng, c = finished_campaign(tmp_path_factory.mktemp("artifacts"))
    return eng, c


def test_result_json_fields_match_the_store(done) -> None:
    eng, c = done
    out = report_dir(c)
    assert out == Path(c.workdir) / "report"
    result = json.loads((out / "result.json").read_text())
    assert result["schema"] == "infrarsi.result/1"
    camp = result["campaign"]
    assert (camp["id"], camp["name"], camp["state"], camp["executor"]) == (c.id, "toy", "report", "inprocess")
    assert camp["commit"] == c.scope["commit"] and camp["contract_digest"] == c.contract_digest
    assert result["delivered_speedup"] == pytest.approx(c.delivered_speedup) and result["delivered_speedup"] > 3.5
    trials = eng.store.list_trials(c.id)
    assert [(t["seq"], t["stage"], t["outcome"]) for t in result["trials"]] == [(t.seq, t.stage, t.outcome)
                                                                                for t in trials]
    assert result["trials"][0]["config"] == {"speed": 1, "chunk": 1, "accum": 2}  # full config, derived included
    assert all(t["accepted"] and t["isolation"] in ("bwrap", "none") for t in result["trials"])
    total = sum(r["gpu_hours"] for r in eng.store.cost_by_stage(c.id))
    assert result["cost"]["total_gpu_hours"] == pytest.approx(total) and result["cost"]["failed_gpu_hours"] == 0
    assert result["cost"]["budget_gpu_hours"] == 1.0
    cpu = sum(r["cpu_hours"] for r in eng.store.cost_by_stage(c.id))  # the toy runs on the CPU
    assert result["cost"]["share_of_budget"] == pytest.approx((total + cpu) / 1.0)
    assert result["cost"]["total_cpu_hours"] == pytest.approx(cpu) and cpu > 0 and total == 0 and result["mfu"] is None
    assert result["trials"][-1]["cum_gpu_hours"] == pytest.approx(total)
    assert result["reference"]["step_time_s"] == pytest.approx(c.doctor["t0"])
    assert result["reference"]["sigma_pair"] == pytest.approx(c.doctor["sigma_pair"])
    assert result["promoted"]["config"]["speed"] == 4 and result["promoted"]["changed"]["speed"] == [1, 4]
    assert len(result["promoted"]["verdicts"]) >= 18 and all(v["status"] != "fail" for v in result["promoted"]["verdicts"])
    assert result["rejections_by_layer"] == {f"L{i}": 0 for i in range(6)}
    assert result["invariant_count"] > 0 and result["refused_patches"] == {}


def test_pack_report_and_experience(done) -> None:
    eng, c = done
    out = report_dir(c)
    pack = YAML(typ="safe").load((out / "pack.yaml").read_text())
    assert pack["campaign"] == c.id and pack["knobs"]["speed"] == 4 and "--speed=4" in pack["command"]
    assert pack["delivered_speedup"] == pytest.approx(c.delivered_speedup)
    assert (out / "REPORT.md").read_text().strip() and (out / "progress.png").stat().st_size > 0
    effects = eng.store.effects(campaign_id=c.id)
    sigma = c.doctor["sigma_pair"]
    assert effects and all(e.campaign == f"toy#{c.id}" for e in effects)
    # measured pairs carry the campaign's noise; the time model's main effects (verified-model) at least that
    assert all(e.noise_floor == pytest.approx(sigma) for e in effects if e.tier != "verified-model")
    assert all(e.noise_floor >= sigma - 1e-12 for e in effects if e.tier == "verified-model")
    # single-knob changes against the reference: ln(t0 / T), searched knobs only (accum is derived)
    search = {e.value: e.log_speedup for e in effects if e.mechanism == "speed" and e.tier == "verified-search"
              and not e.conditioning}
    assert search["4"] == pytest.approx(math.log(4), abs=0.05)
    assert search["2"] == pytest.approx(math.log(2), abs=0.05)
    assert not any(e.knob == "accum" for e in effects)
    # the promoted candidate changes two searched knobs (speed, chunk): no single-knob re-run effect
    promoted = build_result(eng.report_inputs(c), diff="", finished_at="now")["promoted"]
    assert sorted(k for k in promoted["changed"] if k != "accum") == ["chunk", "speed"]
    assert [e for e in effects if e.tier == "verified-rerun"] == []
    obs = eng.store.experience_observations(campaign_id=c.id)
    trials = [t for t in eng.store.list_trials(c.id) if t.stage in ("reference", "search")]
    assert [o.trial for o in obs] == [t.trial_key for t in trials]
    assert all(o.canonical["speed"] == str(o.config["speed"]) for o in obs)
    n = (len(eng.store.effects()), len(eng.store.experience_observations()))
    eng.write_report(eng.store.get_campaign(c.id))  # report again: nothing duplicated
    assert (len(eng.store.effects()), len(eng.store.experience_observations())) == n


def test_build_result_is_pure_and_rewrite_is_atomic(done) -> None:
    eng, c = done
    c = eng.store.get_campaign(c.id)
    n_exp = len(eng.store.effects())
    before = build_result(eng.report_inputs(c), diff="", finished_at="2026-12-01T00:00:00+00:00")
    assert len(eng.store.effects()) == n_exp  # building writes nothing
    paths = write_artifacts(eng.report_inputs(c), before)
    assert set(paths) == {"dir", "report", "result", "pack", "plot"}
    assert not list(paths["dir"].glob("*.tmp*"))  # no half-written file left behind
    after = json.loads(paths["result"].read_text())
    assert after["trials"] == json.loads(json.dumps(before["trials"], default=str))
    assert after["campaign"]["finished_at"] == "2026-12-01T00:00:00+00:00"


def test_build_result_is_a_function_of_its_inputs_the_diff_and_the_time(done) -> None:
    from dataclasses import replace

    eng, c = done
    inp = eng.report_inputs(eng.store.get_campaign(c.id))
    # no repository behind it: building reads no repo (the diff is passed in), no store and no clock
    gone = replace(inp, campaign=replace(inp.campaign, repo_path="/nonexistent/repo"))
    one = build_result(gone, diff="DIFF", finished_at="T1")
    assert one == build_result(gone, diff="DIFF", finished_at="T1")  # the same inputs, the same result
    assert one["promoted"]["diff"] == "DIFF" and one["campaign"]["finished_at"] == "T1"
    two = build_result(gone, diff="", finished_at="T2")
    assert {k: v for k, v in two.items() if k not in ("campaign", "promoted")} == \
        {k: v for k, v in one.items() if k not in ("campaign", "promoted")}
    # the toy's promoted candidate has no patches: its diff is empty (the engine passes promoted_diff's)
    assert one["promoted"]["patches"] == [] and promoted_diff(inp) == ""
    written = json.loads((report_dir(c) / "result.json").read_text())
    assert written["promoted"]["diff"] == "" and written["campaign"]["finished_at"]


def test_promoted_diff_is_empty_without_a_promotion(done) -> None:
    from dataclasses import replace

    eng, c = done
    inp = eng.report_inputs(eng.store.get_campaign(c.id))
    none = replace(inp, result=inp.result.replace(promotion=None))
    assert promoted_diff(none) == ""
    assert build_result(none, diff="", finished_at="T")["promoted"] is None


def test_promoted_diff_of_a_promoted_patch(done, tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.campaign.stub_llm import edit_diff

    eng, c = done
    inp = eng.report_inputs(eng.store.get_campaign(c.id))
    repo = Path(inp.campaign.repo_path)
    old = (repo / "train.py").read_text()
    diff = edit_diff(str(repo / "train.py"), old, old.replace("import argparse\n", "import argparse  # x\n", 1),
                     "train.py")
    promo = dict(inp.result.promotion)
    promo["candidate"] = {**promo["candidate"], "patches": ["p.diff"]}
    camp = replace(inp.campaign, scope={**inp.campaign.scope, "patches": {"p.diff": diff}})
    patched = replace(inp, campaign=camp, result=inp.result.replace(promotion=promo))
    got = promoted_diff(patched)
    assert "+import argparse  # x" in got and "a/train.py" in got
    assert build_result(patched, diff=got, finished_at="T")["promoted"]["diff"] == got
