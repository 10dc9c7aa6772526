"""``infrarsi bench transfer`` (issue 13 item 5): simulated write-back, the JSON object, one-line refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.experience.transfer import campaign_records, landscape_environment, landscape_knobs, run_transfer
from infrarsi.controller.search.benchmark import simulate_campaign
from infrarsi.controller.search.landscape import load_landscape
from tests.experience.transfer_pairs import check_pair

LANDS = Path(__file__).resolve().parents[2] / "bench" / "landscapes"
H20 = LANDS / "transfer_h20_gpt7b.py"
H200 = LANDS / "transfer_h200_gpt7b.py"
L20 = LANDS / "transfer_h20_llama8b.py"
L100 = LANDS / "transfer_h100_llama8b.py"


def test_landscape_environment_and_renamed_knobs_share_mechanisms() -> None:
    a, b = load_landscape(H20), load_landscape(H200)
    ka, kb = landscape_knobs(a), landscape_knobs(b)
    assert {k.name for k in ka}.isdisjoint({k.name for k in kb})        # every flag renamed
    assert {k.mechanism for k in ka} == {k.mechanism for k in kb}          # the same mechanisms
    fp8_a = next(k for k in ka if k.mechanism == "low_precision_gemm")
    fp8_b = next(k for k in kb if k.mechanism == "low_precision_gemm")
    assert fp8_a.canonical_of(True) == fp8_b.canonical_of("e4m3") == "on"
    env = landscape_environment(a, ka)
    assert env.gpu_sku == "H20" and env.reference_state["low_precision_gemm"] == "off"
    assert landscape_environment(b, kb).reference_state == env.reference_state


def test_llama_pair_loads_with_renamed_flags_and_sign_flips() -> None:
    a, b, effect = check_pair(L20, L100, knobs=15, skus=("H20", "H100"), nodes=2, family="llama")
    assert a.space.size() > 100_000
    # the sign flips of the module docstrings: FP8 (hardware-bound kernel), TP and the 400 MB bucket (balance)
    for mech, value in (("low_precision_gemm", "on"), ("tensor_parallel", "2"), ("tensor_parallel", "4"),
                        ("grad_bucket", "400")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, mech
    # kernel levers help on both
    for mech, value in (("graph_compile", "on"), ("attention_kernel", "flash"), ("optimizer_fusion", "fused"),
                        ("fused_cross_entropy", "on"), ("fused_rmsnorm", "on"), ("rope_kernel", "on")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, mech
    # the reference fits both; the H100 has less memory per GPU
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert b.capacity_gib < a.capacity_gib


def test_simulated_write_back_is_verified_and_noise_gated() -> None:
    land = load_landscape(H20)
    camp = simulate_campaign(land, "infrarsi", 0, 12)
    env, obs, effs = campaign_records(land, camp, "src")
    assert len(obs) == 1 + len(camp.result.trials) and obs[0].trial == "reference"
    gate = float(camp.noise.big_knob_gate)
    assert effs, "a 12-trial campaign measured no single-knob change"
    for e in effs:
        assert e.env == env and e.campaign == "src" and e.tier in ("verified-search", "verified-rerun",
                                                                   "verified-model")
        assert abs(e.log_speedup) >= gate and math.isfinite(e.log_speedup)
        if e.tier == "verified-model":  # posterior-gated: beyond the gate and two posterior SDs
            assert e.trial == "model" and e.conditioning == {} and abs(e.log_speedup) >= 2 * e.noise_floor
        assert e.mechanism not in e.conditioning
    assert len({e.key for e in effs}) == len(effs)
    # deterministic: the same seed writes the same records
    _, obs2, effs2 = campaign_records(land, simulate_campaign(land, "infrarsi", 0, 12), "src")
    assert [e.key for e in effs2] == [e.key for e in effs] and [o.trial for o in obs2] == [o.trial for o in obs]


def test_simulated_write_back_records_the_search_s_own_conflicts() -> None:
    """As the real write-back does (``writeback.search_conflicts``): the conflict tuples are the search's own
    ledger's, whose ties its priors break, not a ledger rebuilt without them (which blamed FP8 beside the
    all-to-all dispatcher for Mixtral's FP8 x grouped GEMM crash: seed 15 of the H100 source)."""
    land = load_landscape(LANDS / "transfer_h100_mixtral.py")
    camp = simulate_campaign(land, "infrarsi", 15, 30)
    _, obs, _ = campaign_records(land, camp, "src")
    written = {frozenset(c) for o in obs for c in o.conflicts}
    assert frozenset({("low_precision_gemm", "on"), ("grouped_gemm", "on")}) in written
    assert len(camp.result.summary["banned_tuples"]) == len(written)


def test_run_transfer_json_shape() -> None:
    res = run_transfer(load_landscape(H20), load_landscape(H200), trials=6, repeats=1)
    assert res["source"] == "transfer_h20_gpt7b" and res["target"] == "transfer_h200_gpt7b"
    assert res["peak_speedup"] > 1.3
    assert list(res["modes"]) == ["cold", "bank-all", "bank-filtered"]
    for m, s in res["modes"].items():
        assert {"median_trials_to_90", "median_gpu_hours_to_90", "median_final_speedup", "false_promotions"} <= set(s)
        assert s["median_final_speedup"] >= 1.0 and s["false_promotions"] == 0
    assert res["modes"]["cold"]["median_records"] == 0 and res["modes"]["bank-all"]["median_records"] > 0
    # balance mechanisms measured on another SKU are never covered; kernel ones may be
    grades = res["modes"]["bank-filtered"]["coverage_first_repeat"]
    assert grades["tp"] != "covered" and grades["bucket_cap_mb"] != "covered"
    assert "covered" in grades.values()
    assert all(g == "covered" or g in ("null", "unobserved")
               for g in res["modes"]["bank-all"]["coverage_first_repeat"].values())


def test_refusals(tmp_path: Path) -> None:
    from infrarsi.controller.cli.main import cli

    with pytest.raises(InfrarsiError, match="ENVIRONMENT"):
        run_transfer(load_landscape(LANDS / "quiet_node_levers.py"), load_landscape(H200), trials=2, repeats=1)
    with pytest.raises(InfrarsiError, match="--modes: unknown warm"):
        run_transfer(load_landscape(H20), load_landscape(H200), modes=["cold", "warm"], trials=2, repeats=1)
    out = CliRunner().invoke(cli, ["bench", "transfer", "--source", str(H20), "--target", str(H200),
                                   "--modes", "bank-all", "--trials", "4", "--repeats", "1", "--json"])
    assert out.exit_code == 0, out.output
    assert list(json.loads(out.output)["modes"]) == ["bank-all"]
