"""The write-back's evidence rules (controller/experience/evidence.py): posterior-gated main effects of the time
model (tier ``verified-model``) from verified runs only, never from a cheat, idempotent, ranked below paired
evidence, and the same function for the real and the simulated write-back."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from infrarsi.controller.experience import evidence, transfer, writeback
from infrarsi.controller.experience.evidence import MODEL_TRIAL, Run, evidence_effects, model_effects
from infrarsi.controller.experience.records import Environment, tier_rank
from infrarsi.controller.experience.retrieval import retrieve, setting_priors, target_knobs
from infrarsi.controller.store import open_store
from tests.experience.test_writeback import _records

ENV = Environment(gpu_sku="H20", gpus_per_node=8, nodes=1, interconnect="nvlink", framework="torch",
                  model_family="gpt", params=7e9, seq_len=4096, parallel="tp1-pp1-dp8",
                  reference_state={"low_precision_gemm": "off", "attention_kernel": "sdpa", "graph_compile": "off",
                                   "tensor_parallel": "1"})
KNOBS = target_knobs([
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm"},
    {"name": "attn", "values": ["sdpa", "flash"], "reference": "sdpa", "mechanism": "attention_kernel"},
    {"name": "compile", "values": [False, True], "reference": False, "mechanism": "graph_compile"},
    {"name": "tp", "values": [1, 2], "reference": 1, "mechanism": "tensor_parallel"},
])
#: true log-speedups of the toy world (additive)
TRUE = {"fp8": 0.15, "attn": 0.09, "compile": 0.06, "tp": -0.10}


def _run(trial: str, noise: float = 0.0, **on: bool) -> Run:
    cfg = {"fp8": False, "attn": "sdpa", "compile": False, "tp": 1}
    y = 0.0
    for name, flag in on.items():
        if flag:
            cfg[name] = {"fp8": True, "attn": "flash", "compile": True, "tp": 2}[name]
            y += TRUE[name]
    return Run(trial, cfg, 1.0 * math.exp(-(y + noise)), 50.0 + (10.0 if on.get("fp8") else 0.0))


#: every setting only ever inside bundles (no two runs differ in exactly one knob), but linearly separable
BUNDLES = [Run("reference", {"fp8": False, "attn": "sdpa", "compile": False, "tp": 1}, 1.0, 50.0),
           _run("a", 0.002, fp8=True, attn=True), _run("b", -0.003, attn=True, compile=True),
           _run("c", 0.001, fp8=True, compile=True), _run("d", -0.002, fp8=True, attn=True, compile=True, tp=True),
           _run("e", 0.003, attn=True, tp=True), _run("f", -0.001, fp8=True, tp=True)]


def test_bundled_settings_get_posterior_gated_model_effects() -> None:
    effs = evidence_effects(KNOBS, BUNDLES, ENV, "src#1", gate=0.02, sigma=0.005)
    assert all(e.tier == "verified-model" for e in effs)          # no pair differs in one knob
    got = {e.knob: e for e in effs}
    assert set(got) == {"fp8", "attn", "compile", "tp"}
    for name, e in got.items():
        assert e.trial == MODEL_TRIAL and e.conditioning == {} and e.campaign == "src#1" and e.env == ENV
        assert e.log_speedup == pytest.approx(TRUE[name], abs=0.01)
        assert abs(e.log_speedup) >= max(0.02, 2 * e.noise_floor) and e.noise_floor >= 0.005
    assert got["tp"].klass == "balance" and got["fp8"].klass == "kernel"
    assert got["fp8"].mem_delta_gib == pytest.approx(10.0, abs=0.5)
    assert tier_rank("verified-search") > tier_rank("verified-model") > tier_rank("legacy")


def test_settings_never_measured_apart_are_not_written() -> None:
    runs = [BUNDLES[0], _run("a", fp8=True, attn=True), _run("b", 0.002, fp8=True, attn=True),
            _run("c", compile=True)]
    effs = model_effects(KNOBS, runs, ENV, "src#1", gate=0.02, sigma=0.005)
    # fp8 and flash always switched on together: the posterior cannot split them, nothing is written for them;
    # compile ran once (fewer than MODEL_MIN_RUNS verified runs): not written either
    assert effs == []
    # an effect inside the noise gate is never written, however precise
    quiet = [BUNDLES[0]] + [Run(f"q{i}", {"compile": bool(i % 2)}, math.exp(-0.01 * (i % 2))) for i in range(8)]
    assert model_effects(KNOBS, quiet, ENV, "src#1", gate=0.02, sigma=0.005) == []


def test_an_interaction_the_additive_model_lacks_widens_the_posterior() -> None:
    # flash helps only with compile (an interaction): the residuals exceed the noise and no main effect clears
    runs = [BUNDLES[0]]
    for i, (a, c) in enumerate([(1, 0), (0, 1), (1, 1), (1, 0), (0, 1), (1, 1), (0, 0)]):
        y = 0.12 if a and c else -0.04 if a else 0.0
        runs.append(Run(f"i{i}", {"attn": "flash" if a else "sdpa", "compile": bool(c)}, math.exp(-y)))
    effs = {e.knob: e for e in model_effects(KNOBS, runs, ENV, "src#1", gate=0.02, sigma=0.002)}
    assert all(e.noise_floor > 0.01 for e in effs.values())
    assert "attn" not in effs  # its main effect (+0.04 on average) does not clear two widened SDs


def test_a_cheat_or_unverified_run_never_becomes_an_effect() -> None:
    honest = {"ref-a": ({}, "ok", 1.0, True), "fp8+tp": ({"use_fp8": True, "tp": 2}, "ok", 0.95, True),
              "fp8+attn": ({"use_fp8": True, "attn": "fa2"}, "ok", 0.75, True),
              "attn+tp": ({"attn": "fa2", "tp": 2}, "ok", 0.90, True),
              "all": ({"use_fp8": True, "attn": "fa2", "tp": 2}, "ok", 0.80, True)}
    _, _, base = _records(honest)
    cheats = dict(honest)
    cheats["cheat"] = ({"attn": "xf"}, "ok", 0.2, False)                   # fast, but the verifier refused it
    cheats["cheat2"] = ({"attn": "xf", "tp": 2}, "rejected", 0.1, False)   # rejected
    cheats["cheat3"] = ({"attn": "xf", "use_fp8": True}, "ok", 0.15, False)
    _, obs, effs = _records(cheats)
    assert sorted((e.key, round(e.log_speedup, 12)) for e in effs) == \
        sorted((e.key, round(e.log_speedup, 12)) for e in base)
    assert {o.trial for o in obs} >= {"cheat", "cheat2", "cheat3"}              # observed, never evidence
    assert not any(e.raw_value == "xf" for e in effs)
    assert any(e.tier == "verified-model" for e in base)


def test_model_effects_are_idempotent_in_the_store(tmp_path: Path) -> None:
    world = {"ref-a": ({}, "ok", 1.0, True), "fp8+tp": ({"use_fp8": True, "tp": 2}, "ok", 0.95, True),
             "fp8+attn": ({"use_fp8": True, "attn": "fa2"}, "ok", 0.75, True),
             "attn+tp": ({"attn": "fa2", "tp": 2}, "ok", 0.90, True),
             "all": ({"use_fp8": True, "attn": "fa2", "tp": 2}, "ok", 0.80, True)}
    store = open_store(f"sqlite:///{tmp_path / 'bank.sqlite'}", auto_upgrade=True)
    env, obs, effs = _records(world)
    assert any(e.tier == "verified-model" for e in effs)
    first = writeback.write_back(store, None, env, obs, effs)
    assert first == {"observations": len(obs), "effects": len(effs)}
    env2, obs2, effs2 = _records(world)                      # a re-run of report computes the same keys
    assert [e.key for e in effs2] == [e.key for e in effs]
    assert writeback.write_back(store, None, env2, obs2, effs2) == {"observations": 0, "effects": 0}
    stored = store.effects()
    assert len(stored) == len(effs) and len({e.key for e in stored}) == len(stored)
    assert {e.tier for e in stored} >= {"verified-model"}


def test_retrieval_ranks_model_effects_below_and_uses_one_estimate_per_campaign() -> None:
    target = Environment(**{**ENV.to_dict(), "gpu_sku": "H200"})
    paired = evidence_effects(KNOBS, BUNDLES[:1] + [_run("x", attn=True)], ENV, "src#1", 0.02, 0.005)
    model = [e for e in evidence_effects(KNOBS, BUNDLES, ENV, "src#1", 0.02, 0.005) if e.knob == "attn"]
    assert [e.tier for e in paired] == ["verified-search"] and [e.tier for e in model] == ["verified-model"]
    got = retrieve(model + paired, target, KNOBS)
    assert [r.effect.tier for r in got] == ["verified-search", "verified-model"]   # same coverage: tier first
    (row,) = setting_priors(got, {})
    assert row["records"] == 2
    # the two come from one campaign's runs: only the more precise one moves the prior (here the model's is no
    # more precise than the unconditioned pair), so the prior equals the pair's alone
    (alone,) = setting_priors(retrieve(paired, target, KNOBS), {})
    assert row["log_speedup"] == pytest.approx(alone["log_speedup"]) and row["prior_sd"] == pytest.approx(
        alone["prior_sd"])


def test_fp8_and_balance_effects_from_another_sku_carry_no_sign() -> None:
    effs = evidence_effects(KNOBS, BUNDLES, ENV, "src#1", gate=0.02, sigma=0.005)
    other = Environment(**{**ENV.to_dict(), "gpu_sku": "H200"})
    rows = {r["knob"]: r for r in setting_priors(retrieve(effs, other, KNOBS), {})}
    assert "log_speedup" not in rows["fp8"] and "log_speedup" not in rows["tp"]     # may flip between SKUs
    assert rows["fp8"]["coverage"] == rows["tp"]["coverage"] == "partial"
    assert rows["fp8"]["mem_gib"] == pytest.approx(10.0, abs=0.5)                 # memory still transfers
    assert rows["attn"]["coverage"] == "covered" and rows["attn"]["log_speedup"] > 0.05
    same = {r["knob"]: r for r in setting_priors(retrieve(effs, ENV, KNOBS), {})}
    assert same["fp8"]["coverage"] == "covered" and same["fp8"]["log_speedup"] > 0.1
    assert same["tp"]["log_speedup"] < -0.05


def test_one_rule_for_the_real_and_the_simulated_write_back() -> None:
    assert writeback.evidence_effects is evidence.evidence_effects is transfer.evidence_effects
    assert writeback.gate_of is evidence.gate_of and writeback.MIN_GATE == evidence.MIN_GATE


def test_write_back_reads_conflicts_and_requirements_from_the_rebuilt_search() -> None:
    from types import SimpleNamespace

    ledger = SimpleNamespace(banned=[(("attn", "fa2"), ("tp", 2))],
                             requirements=[(("overlap_param_gather", True), ("use_distributed_optimizer", True))])
    search = SimpleNamespace(ledger=ledger)
    assert writeback.search_conflicts(lambda: search) == ledger.banned
    assert writeback.search_failures(lambda: search) == (ledger.banned, ledger.requirements)

    def broken():
        raise RuntimeError("cannot rebuild")

    assert writeback.search_conflicts(broken) == []
    assert writeback.search_failures(broken) == ([], [])
    assert writeback.search_failures(None) == ([], [])
