"""Retrieval (issue 13 item 3): scope check, distance, ranking, grades, priors, experience start, conflicts."""

from __future__ import annotations

import math

import pytest

from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.experience.retrieval import (
    conflicts, distance, knob_grades, param_bucket, record_sd, retrieve, scope, search_experience,
    seq_bucket, setting_priors, target_knobs)
from infrarsi.controller.experience.start import first_start

REF_STATE = {"graph_compile": "off", "tensor_parallel": "1", "attention_kernel": "sdpa", "micro_batch": "1"}
H20 = Environment(gpu_sku="H20", gpu_mem_gib=96.0, gpus_per_node=8, nodes=1, interconnect="nvlink",
                  framework="torch", model_family="gpt", params=7e9, seq_len=4096, parallel="tp1-pp1-dp8",
                  reference_state=REF_STATE)
H200 = Environment(gpu_sku="H200", gpu_mem_gib=141.0, gpus_per_node=8, nodes=1, interconnect="nvlink",
                   framework="torch", model_family="gpt", params=7e9, seq_len=4096, parallel="tp1-pp1-dp8",
                   reference_state=REF_STATE)

#: the target's knobs: other flag names, the same mechanisms, canonical maps
KNOBS = target_knobs([
    {"name": "compile", "values": ["none", "inductor"], "reference": "none", "mechanism": "graph_compile",
     "canonical": {"none": "off", "inductor": "on"}},
    {"name": "tp", "values": [1, 2, 4], "reference": 1, "mechanism": "tensor_parallel"},
    {"name": "attn_impl", "values": ["math", "flash"], "reference": "math", "mechanism": "attention_kernel"},
    {"name": "mbs", "values": [1, 8], "reference": 1, "mechanism": "micro_batch"},
])


def effect(mechanism: str, value: str, e: float, env: Environment = H20, tier: str = "verified-search",
           trial: str = "t1", klass: str | None = None, mem: float | None = None,
           conditioning: dict[str, str] | None = None) -> Effect:
    from infrarsi.controller.experience.mechanisms import mechanism_class

    return Effect(environment=env.digest(), mechanism=mechanism, value=value,
                  klass=klass or mechanism_class(mechanism), log_speedup=e, noise_floor=0.01,
                  conditioning=conditioning or {}, tier=tier, campaign="src#1", trial=trial, mem_delta_gib=mem,
                  env=env)


def test_buckets() -> None:
    assert seq_bucket(4096) == seq_bucket(3000) == 12 and seq_bucket(8192) == 13 and seq_bucket(None) is None
    assert param_bucket(7e9) == param_bucket(4e9) == 19 and param_bucket(1.2e10) == 20 and param_bucket(0) is None


def test_scope_framework_family_seq_and_balance_fields() -> None:
    from dataclasses import replace

    assert scope(H20, H200, "kernel") == "covered"          # kernel: SKU may differ
    assert scope(H20, H200, "balance") == "partial"         # balance: SKU must match
    assert scope(H200, H200, "balance") == "covered"
    assert scope(replace(H200, framework="jax"), H200, "kernel") == "incompatible"
    assert scope(replace(H200, model_family="llama"), H200, "kernel") == "partial"
    assert scope(replace(H200, seq_len=8192), H200, "kernel") == "partial"
    assert scope(replace(H200, seq_len=3000), H200, "kernel") == "covered"  # same power-of-two bucket
    for field, value in (("nodes", 2), ("gpus_per_node", 4), ("interconnect", "pcie"), ("params", 7e10),
                         ("parallel", "tp2-pp1-dp4")):
        assert scope(replace(H200, **{field: value}), H200, "balance") == "partial", field
        assert scope(replace(H200, **{field: value}), H200, "kernel") == "covered", field
    assert scope(replace(H200, framework=None), H200, "kernel") == "partial"  # unknown never matches


def test_distance_terms() -> None:
    from dataclasses import replace

    assert distance(H200, H200) == 0.0
    assert distance(H20, H200) == pytest.approx(1.0)
    two_nodes_13b = replace(H20, nodes=2, params=14e9, seq_len=8192)
    assert distance(two_nodes_13b, H200) == pytest.approx(2.0 + math.log(2) + math.log(2))
    # reference-state mismatches: the record's reference state overridden by its conditioning
    assert distance(H200, H200, {"graph_compile": "on"}) == pytest.approx(0.25)
    assert distance(replace(H200, reference_state=REF_STATE | {"graph_compile": "on", "tensor_parallel": "2"}), H200) == \
        pytest.approx(0.5)
    assert distance(replace(H200, params=None), H200) == pytest.approx(1.0)


def test_retrieve_maps_renamed_flags_ranks_and_discards() -> None:
    from dataclasses import replace

    jax = replace(H200, framework="jax")
    effs = [effect("graph_compile", "on", 0.07, H20, trial="a"),
            effect("graph_compile", "on", 0.08, H200, tier="verified-rerun", trial="b"),
            effect("graph_compile", "on", 0.09, H200, trial="c"),
            effect("graph_compile", "on", 0.5, jax, trial="d"),                 # incompatible: discarded
            effect("tensor_parallel", "4", 0.12, H20, trial="e"),               # balance on another SKU: partial
            effect("tensor_parallel", "1", -0.1, H20, trial="f"),               # our reference value: skipped
            effect("attention_kernel", "flash", 0.1, H20, trial="g"),
            effect("fp8_unknown_mech", "on", 0.3, H200, trial="h")]             # no target knob
    got = retrieve(effs, H200, KNOBS)
    assert [(r.knob, r.value, r.coverage, r.effect.trial) for r in got] == [
        ("compile", "inductor", "covered", "b"),    # covered, strongest tier, d = 0
        ("compile", "inductor", "covered", "c"),    # covered, d = 0
        ("attn_impl", "flash", "covered", "g"),     # covered, d = 1 (ties broken by knob name)
        ("compile", "inductor", "covered", "a"),
        ("tp", 4, "partial", "e"),
    ]
    assert [r.distance for r in got] == [0.0, 0.0, 1.0, 1.0, 1.0]
    everything = retrieve(effs, H200, KNOBS, mode="all")  # no scope, no distance: the jax record too
    assert {r.effect.trial for r in everything} == {"a", "b", "c", "d", "e", "g"}
    assert all(r.coverage == "covered" and r.distance == 0.0 for r in everything)
    with pytest.raises(ValueError, match="retrieval mode"):
        retrieve(effs, H200, KNOBS, mode="some")


def test_grades_covered_partial_null_unobserved() -> None:
    effs = [effect("graph_compile", "on", 0.07, H20), effect("tensor_parallel", "2", 0.1, H20)]
    obs = [Observation(environment=H20.digest(), campaign="src#1", trial="x", config={},
                       canonical={"micro_batch": "8", "graph_compile": "off"}, step_time_s=1.0,
                       verdicts={"outcome": "ok"})]
    got = retrieve(effs, H200, KNOBS)
    grades = knob_grades(KNOBS, got, obs, {H20.digest(): H20}, H200)
    assert grades == {"compile": "covered", "tp": "partial", "mbs": "null", "attn_impl": "unobserved"}


def test_priors_shrink_with_distance_and_partial_scope() -> None:
    near = retrieve([effect("graph_compile", "on", 0.10, H200)], H200, KNOBS)
    far = retrieve([effect("graph_compile", "on", 0.10, H20)], H200, KNOBS)
    llama = Environment(**{**H200.to_dict(), "model_family": "llama"})
    part = retrieve([effect("graph_compile", "on", 0.10, llama, mem=-3.0)], H200, KNOBS)   # kernel, other family
    flip = retrieve([effect("tensor_parallel", "4", 0.10, H20, mem=-30.0)], H200, KNOBS)   # balance, other SKU
    assert part[0].coverage == flip[0].coverage == "partial" and part[0].signed and not flip[0].signed
    assert record_sd(near[0]) < record_sd(far[0]) < record_sd(part[0])
    (pn,), (pf,), (pp,), (px,) = (setting_priors(r, {}) for r in (near, far, part, flip))
    assert 0.09 < pn["log_speedup"] <= 0.10 and pn["prior_sd"] < 0.02
    assert 0.0 < pp["log_speedup"] < pf["log_speedup"] < pn["log_speedup"]
    assert pp["prior_sd"] > pf["prior_sd"] > pn["prior_sd"]
    assert pf["distance"] == 1.0 and pn["distance"] == 0.0
    # a balance effect from another SKU moves no speed prior (its sign may flip), only the memory prior
    assert "log_speedup" not in px and "prior_sd" not in px and px["coverage"] == "partial"
    assert px["mem_gib"] == pytest.approx(-30.0) and px["mem_sd"] > 1.0
    # ... but says how much it mattered there, sign withheld: a harmful one as much as a helpful one
    assert px["unsigned_gain"] == pytest.approx(0.10) and "unsigned_gain" not in pf
    (ph,) = setting_priors(retrieve([effect("tensor_parallel", "4", -0.07, H20)], H200, KNOBS), {})
    assert ph["unsigned_gain"] == pytest.approx(0.07)
    # the knob's own prior enters as the base; conflicting records widen the SD
    (pb,) = setting_priors(far, {("compile", "inductor"): (-0.05, 0.05)})
    assert pb["log_speedup"] < pf["log_speedup"]
    mixed = retrieve([effect("graph_compile", "on", 0.10, H200, trial="1"),
                      effect("graph_compile", "on", -0.10, H200, trial="2")], H200, KNOBS)
    (pm,) = setting_priors(mixed, {})
    assert abs(pm["log_speedup"]) < 0.01 and pm["prior_sd"] > 0.05


def _obs(trial: str, canonical: dict[str, str], t: float | None, env: Environment = H20, outcome: str = "ok",
         conflicts: tuple = (), shortfall: float | None = None, mem: float | None = None) -> Observation:
    return Observation(environment=env.digest(), campaign="src#1", trial=trial, config={}, canonical=canonical,
                       step_time_s=t, verdicts={"outcome": outcome}, conflicts=conflicts,
                       oom_shortfall_gib=shortfall, peak_mem_gib=mem)


def test_first_start_maps_covered_settings_only() -> None:
    ref = {"graph_compile": "off", "tensor_parallel": "1", "attention_kernel": "sdpa", "micro_batch": "1"}
    best = {"graph_compile": "on", "tensor_parallel": "4", "attention_kernel": "flash", "micro_batch": "8"}
    obs = [_obs("ref", ref, 2.0), _obs("best", best, 1.0), _obs("slow", ref | {"micro_batch": "8"}, 1.5),
           _obs("oom", best | {"micro_batch": "16"}, None, outcome="oom")]
    envs = {H20.digest(): H20}
    filt = first_start(obs, envs, H200, KNOBS, "filtered")
    # tensor parallel is balance: measured on another SKU, it is not covered and stays at the reference
    assert filt == {"config": {"compile": "inductor", "tp": 1, "attn_impl": "flash", "mbs": 8}, "speedup": 2.0,
                    "campaign": "src#1"}
    assert first_start(obs, envs, H200, KNOBS, "all")["config"]["tp"] == 4
    assert first_start(obs, {}, H200, KNOBS, "filtered") is None  # unknown environment: nothing to trust


def test_first_start_carries_its_bundle_memory_and_the_settings_it_left_out() -> None:
    """The best observation's peak above the reference's, measured as one bundle (micro-batch and activation
    memory do not add up), with the target settings the start drops so the search can take their estimates
    back out; nothing when a setting of the bundle has no knob here (its memory could not be taken out)."""
    best = {"graph_compile": "on", "tensor_parallel": "4", "attention_kernel": "flash", "micro_batch": "8"}
    obs = [_obs("ref", REF_STATE, 2.0, mem=40.0), _obs("best", best, 1.0, mem=75.0)]
    envs = {H20.digest(): H20}
    got = first_start(obs, envs, H200, KNOBS, "filtered")
    assert got["config"]["tp"] == 1  # balance from another SKU: left at the reference
    assert got["mem_delta_gib"] == pytest.approx(35.0) and got["mem_dropped"] == [["tp", 4]]
    whole = first_start(obs, envs, H200, KNOBS, "all")
    assert whole["mem_delta_gib"] == pytest.approx(35.0) and whole["mem_dropped"] == []
    alien = [_obs("ref", REF_STATE, 2.0, mem=40.0), _obs("best", best | {"zero_stage": "3"}, 1.0, mem=75.0)]
    assert "mem_delta_gib" not in first_start(alien, envs, H200, KNOBS, "filtered")
    assert "mem_delta_gib" not in first_start([_obs("ref", REF_STATE, 2.0), _obs("best", best, 1.0, mem=75.0)],
                                              envs, H200, KNOBS, "filtered")  # no reference peak


def test_conflicts_transfer_by_scope_and_memory() -> None:
    crash = (("graph_compile", "on"), ("attention_kernel", "flash"))
    balance = (("tensor_parallel", "4"), ("graph_compile", "on"))
    obs = [_obs("c1", {}, None, outcome="crash", conflicts=(crash,)),
           _obs("c2", {}, None, outcome="crash", conflicts=(balance,)),
           _obs("o1", {}, None, H200, outcome="oom", conflicts=((("micro_batch", "8"), ("graph_compile", "on")),),
                shortfall=3.0),
           _obs("o2", {}, None, H20, outcome="oom", conflicts=((("micro_batch", "8"), ("attention_kernel", "flash")),),
                shortfall=3.0)]
    envs = {H20.digest(): H20, H200.digest(): H200}
    got = conflicts(obs, envs, H200, KNOBS, "filtered")
    # the kernel crash transfers, the balance one (TP from another SKU) does not; the OOM from a GPU with as much
    # memory transfers, the OOM from a smaller GPU (H20, 96 GiB) does not
    assert got == [{"conflict": [["attn_impl", "flash"], ["compile", "inductor"]]},
                   {"conflict": [["compile", "inductor"], ["mbs", 8]]}]
    assert len(conflicts(obs, envs, H200, KNOBS, "all")) == 4


def test_search_experience_drives_the_controller() -> None:
    """The records reach SearchController: the first start is the experience start, priors move, the conflict
    is known, and a belief measured elsewhere is marked transferred (the contrarian probe reads it)."""
    import numpy as np

    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.space import Candidate, KnobSpec, SearchSpace
    from infrarsi.surrogate.noise import calibrate

    ref = {"graph_compile": "off", "tensor_parallel": "1", "attention_kernel": "sdpa", "micro_batch": "1"}
    best = {"graph_compile": "on", "tensor_parallel": "4", "attention_kernel": "flash", "micro_batch": "1"}
    obs = [_obs("ref", ref, 2.0), _obs("best", best, 1.0),
           _obs("c", {}, None, outcome="crash", conflicts=((("tensor_parallel", "2"), ("micro_batch", "8")),),
                env=H200)]
    effs = [effect("graph_compile", "on", 0.15, H20, mem=-2.0), effect("attention_kernel", "flash", 0.1, H20)]
    envs = {H20.digest(): H20, H200.digest(): H200}
    records, grades = search_experience(effs, obs, envs, H200, KNOBS)
    assert grades["compile"] == "covered" and grades["tp"] == "null"
    space = SearchSpace(tuple(KnobSpec(k.name, k.values, k.reference) for k in KNOBS))
    rng = np.random.default_rng(0)
    noise = calibrate([np.exp(rng.normal(0, 0.01, 24)) for _ in range(3)])
    ctrl = SearchController(space, noise, 1.0, 80.0, seed=0, experience=records)
    assert ctrl.starts[0] == Candidate.from_dict({"compile": "inductor", "tp": 1, "attn_impl": "flash", "mbs": 1})
    eff = ctrl.single_effects()
    assert 0.05 < eff[("compile", "inductor")][0] < 0.15 and eff[("tp", 2)][0] == 0.0  # shrunk: measured on H20
    assert ctrl.ledger.blocked(frozenset({("tp", 2), ("mbs", 8)})) is not None
    assert ctrl.mem_delta(("compile", "inductor")) == pytest.approx(-2.0, abs=0.5)
    assert set(ctrl.transferred) == {("compile", "inductor"), ("attn_impl", "flash")}


def test_memory_delta_only_from_records_against_the_reference() -> None:
    """A memory delta measured on top of other settings (conditioning) does not become a memory prior: memory
    interacts (activations per micro-batch divided by TP), so it says little about the target's reference."""
    alone = effect("micro_batch", "8", 0.05, H20, mem=60.0)
    beside = effect("micro_batch", "8", 0.05, H20, trial="t2", mem=20.0, conditioning={"tensor_parallel": "4"})
    (p,) = setting_priors(retrieve([beside], H200, KNOBS), {})
    assert "mem_gib" not in p and "log_speedup" in p            # the speed prior still moves
    (q,) = setting_priors(retrieve([alone, beside], H200, KNOBS), {})
    assert q["mem_gib"] == pytest.approx(60.0) and q["records"] == 2


def test_fp8_crash_conflict_transfers_across_skus_not_its_sign() -> None:
    """Whether FP8 helps is the SKU's (hardware-bound); whether it crashes beside another kernel is the software's:
    the crash tuple transfers from another SKU, an OOM tuple from a smaller GPU still does not."""
    knobs = KNOBS + target_knobs([{"name": "fp8", "values": [False, True], "reference": False,
                                   "mechanism": "low_precision_gemm", "canonical": {"False": "off", "True": "on"}}])
    crash = (("low_precision_gemm", "on"), ("graph_compile", "on"))
    oom = (("low_precision_gemm", "on"), ("micro_batch", "8"))
    obs = [_obs("c1", {}, None, H20, outcome="crash", conflicts=(crash,)),
           _obs("o1", {}, None, H20, outcome="oom", conflicts=(oom,), shortfall=2.0),
           _obs("p1", {"low_precision_gemm": "on"}, 1.0, H20)]  # FP8 runs on the H20: the crash is the software's
    got = conflicts(obs, {H20.digest(): H20}, H200, knobs, "filtered")
    assert got == [{"conflict": [["compile", "inductor"], ["fp8", True]]}]
    (p,) = setting_priors(retrieve([effect("low_precision_gemm", "on", 0.1, H20)], H200, knobs), {})
    assert "log_speedup" not in p and p["coverage"] == "partial"


def test_a_crash_conflict_transfers_as_a_ban_only_when_the_source_pinned_it() -> None:
    """A known conflict is a hard ban in the search: a crash tuple is carried as one only when the source's passing
    runs rule out every other pair of that crash (its ledger picks one among several otherwise); until then it is
    carried as a suspect, which bans nothing."""
    crash = {"graph_compile": "on", "attention_kernel": "flash", "micro_batch": "8"}
    tup = (("graph_compile", "on"), ("attention_kernel", "flash"))
    obs = [_obs("c", crash, None, outcome="crash", conflicts=(tup,)),
           _obs("a", {"graph_compile": "on", "micro_batch": "8"}, 1.0)]
    envs = {H20.digest(): H20}
    # flash x mbs 8 is as likely: a suspect only
    assert conflicts(obs, envs, H200, KNOBS, "filtered") == [{"suspect": [["attn_impl", "flash"],
                                                                           ["compile", "inductor"]]}]
    assert len(conflicts(obs, envs, H200, KNOBS, "all")) == 1
    obs.append(_obs("b", {"attention_kernel": "flash", "micro_batch": "8"}, 1.0))
    assert conflicts(obs, envs, H200, KNOBS, "filtered") == [{"conflict": [["attn_impl", "flash"],
                                                                            ["compile", "inductor"]]}]


def test_an_fp8_crash_from_a_sku_where_fp8_never_ran_is_only_a_suspect() -> None:
    """The attack on transfer this stops: an A100 has no FP8 tensor cores, so every FP8 run of an A100 campaign
    crashes, and one that added FP8 alone to a passing run pins FP8 as the cause.  Carried to an H100 as a ban,
    it would keep FP8 (a real lever there) out of the search for good.  From a SKU where FP8 never passed the
    crash may be the hardware's: a suspect, which the H100 tests once.  On the same SKU, or once FP8 passed on the
    source's, it is a ban as before."""
    knobs = KNOBS + target_knobs([{"name": "fp8", "values": [False, True], "reference": False,
                                   "mechanism": "low_precision_gemm", "canonical": {"False": "off", "True": "on"}}])
    a100 = Environment(gpu_sku="A100", gpu_mem_gib=80.0, gpus_per_node=8, nodes=1, interconnect="nvlink",
                       framework="torch", model_family="gpt", params=7e9, seq_len=4096, parallel="tp1-pp1-dp8",
                       reference_state=REF_STATE)
    envs = {a100.digest(): a100}
    fp8 = (("low_precision_gemm", "on"),)
    obs = [_obs("p1", {"graph_compile": "on"}, 1.0, a100),
           _obs("c1", {"graph_compile": "on", "low_precision_gemm": "on"}, None, a100, outcome="crash",
                conflicts=(fp8,))]
    assert conflicts(obs, envs, H200, knobs, "filtered") == [{"suspect": [["fp8", True]]}]
    assert conflicts(obs, envs, a100, knobs, "filtered") == [{"conflict": [["fp8", True]]}]  # same SKU: a ban
    assert conflicts(obs, envs, H200, knobs, "all") == [{"conflict": [["fp8", True]]}]
    # FP8 ran on that A100 after all (a newer driver), so its ledger blamed the pair: a software fact, a ban
    pair = (("graph_compile", "on"), ("low_precision_gemm", "on"))
    obs = [obs[0], _obs("p2", {"low_precision_gemm": "on"}, 1.1, a100),
           _obs("c1", {"graph_compile": "on", "low_precision_gemm": "on"}, None, a100, outcome="crash",
                conflicts=(pair,))]
    assert conflicts(obs, envs, H200, knobs, "filtered") == [{"conflict": [["compile", "inductor"], ["fp8", True]]}]


def test_a_crash_a_missing_partner_may_explain_pins_no_conflict() -> None:
    """The attack on transfer this stops (Gemma 9B L40S -> H200, seeds 14/16/28 of the transfer sweep): FP8 crashed
    without compile beside no activation checkpointing; every passing FP8 run had compile, and FP8 never passed
    beside no checkpointing, so that pair was the crash's one unseen pair and was carried as a hard ban, which kept
    the target's peak (FP8 *with* no checkpointing) out of reach for the whole campaign.  While "FP8 needs compile"
    also fits the crash, the pair is only a suspect; once passing runs refute every such partner, it is pinned."""
    crash = {"attention_kernel": "flash", "micro_batch": "8"}  # compile at its reference: "off"
    tup = (("attention_kernel", "flash"), ("micro_batch", "8"))
    obs = [_obs("c", crash, None, outcome="crash", conflicts=(tup,)),
           _obs("a", {"graph_compile": "on", "attention_kernel": "flash"}, 1.0),
           _obs("b", {"graph_compile": "on", "micro_batch": "8"}, 1.0)]
    envs = {H20.digest(): H20}
    assert conflicts(obs, envs, H200, KNOBS, "filtered") == [{"suspect": [["attn_impl", "flash"], ["mbs", 8]]}]
    obs.append(_obs("d", {"attention_kernel": "flash"}, 1.1))  # flash passes without compile ...
    assert conflicts(obs, envs, H200, KNOBS, "filtered") == [{"suspect": [["attn_impl", "flash"], ["mbs", 8]]}]
    obs.append(_obs("e", {"micro_batch": "8"}, 1.1))  # ... and so does micro-batch 8: only the pair is left
    assert conflicts(obs, envs, H200, KNOBS, "filtered") == [{"conflict": [["attn_impl", "flash"], ["mbs", 8]]}]


def test_a_suspect_steers_the_target_ledger_s_first_guess_and_bans_nothing() -> None:
    """The attack on transfer this stops: the source's ambiguous blame (FP8 x grouped GEMM, not provable from its
    passing runs) is dropped, so the target's first FP8 crash is blamed on the most aggressive partner (flash)
    and FP8 stays behind grouped GEMM.  As a suspect it decides that tie, and bans nothing on its own."""
    import numpy as np

    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.space import KnobSpec, Outcome, SearchSpace
    from infrarsi.surrogate.noise import calibrate

    space = SearchSpace((KnobSpec("compile", ("none", "inductor"), "none"),
                         KnobSpec("attn_impl", ("sdpa", "flash"), "sdpa"), KnobSpec("mbs", (1, 8), 1)))
    rng = np.random.default_rng(0)
    noise = calibrate([np.exp(rng.normal(0, 0.01, 24)) for _ in range(3)])
    priors = [{"knob": "attn_impl", "value": "flash", "log_speedup": 0.3, "prior_sd": 0.1},
              {"knob": "compile", "value": "inductor", "log_speedup": 0.05, "prior_sd": 0.1},
              {"knob": "mbs", "value": 8, "log_speedup": 0.1, "prior_sd": 0.1}]
    crash = frozenset({("compile", "inductor"), ("attn_impl", "flash"), ("mbs", 8)})

    def first_ban(experience: list[dict]) -> set:
        ctrl = SearchController(space, noise, 1.0, 80.0, seed=0, experience=experience)
        assert ctrl.ledger.blocked(frozenset({("compile", "inductor"), ("mbs", 8)})) is None
        ctrl.ledger.record(crash, Outcome("crash", reason="boom"), lambda s: 0.0)
        (ban,) = ctrl.ledger.banned
        return set(ban)

    # without the hint the two most aggressive settings are blamed
    assert first_ban(priors) == {("attn_impl", "flash"), ("mbs", 8)}
    hint = {"suspect": [["compile", "inductor"], ["mbs", 8]]}
    assert first_ban(priors + [hint]) == {("compile", "inductor"), ("mbs", 8)}


def test_a_suspect_is_avoided_until_the_target_explains_a_crash_of_its_settings_otherwise() -> None:
    """Mixtral H100 -> H20: the source's unpinned FP8 x grouped GEMM kept the target from adding FP8 on top of
    grouped GEMM (a sure crash) - but a wrong suspect must not keep two good settings apart for good: once the
    target's own ledger bans another tuple with one of its settings, the suspect is lifted."""
    import numpy as np

    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.space import Candidate, KnobSpec, Outcome, SearchSpace
    from infrarsi.surrogate.noise import calibrate

    space = SearchSpace((KnobSpec("fp8", (False, True), False), KnobSpec("grouped", (False, True), False),
                         KnobSpec("compile", (False, True), False)))
    rng = np.random.default_rng(0)
    noise = calibrate([np.exp(rng.normal(0, 0.01, 24)) for _ in range(3)])
    both = Candidate.from_dict({"fp8": True, "grouped": True, "compile": False})
    ctrl = SearchController(space, noise, 1.0, 80.0, seed=0)
    assert ctrl.admissible(both, set()) is None  # control: without experience nothing keeps them apart
    ctrl = SearchController(space, noise, 1.0, 80.0, seed=0,
                            experience=[{"suspect": [["fp8", True], ["grouped", True]]}])
    assert "suspected conflict" in (ctrl.admissible(both, set()) or "")
    assert ctrl.admissible(Candidate.from_dict({"fp8": True, "grouped": False, "compile": True}), set()) is None
    # the target finds FP8's own crash partner (compile): the suspect's crash is explained, the pair may run
    ctrl.tell(Candidate.from_dict({"fp8": True, "grouped": False, "compile": True}), Outcome("crash", reason="boom"))
    assert ctrl.admissible(both, set()) is None


def test_a_setting_that_rode_along_is_carried_only_where_the_targets_own_prior_favours_it() -> None:
    """Phi 14B A100 -> H100 (held out, session 16): flash attention ran in every source trial that had it beside
    other levers, so the bank holds no effect of it, and the filtered start dropped it although the target's own
    prior rates it (a cold search starts with it).  Now the stated prior stands in for the missing evidence: a
    rode-along setting the target's prior favours is carried, one it rates at zero is not, and a covered effect
    that hurts still drops its setting whatever the prior says."""
    best = {"graph_compile": "on", "tensor_parallel": "1", "attention_kernel": "flash", "micro_batch": "8"}
    obs = [_obs("ref", REF_STATE, 2.0), _obs("best", best, 1.0)]
    effects = [effect("graph_compile", "on", 0.08), effect("micro_batch", "8", 0.05)]
    envs = {H20.digest(): H20}

    def start(base: dict) -> dict:
        records, _ = search_experience(effects, obs, envs, H200, KNOBS, base=base)
        (got,) = [r for r in records if "config" in r]
        return got["config"]

    assert start({})["attn_impl"] == "math"  # no effect, no prior: rode along, not carried
    assert start({("attn_impl", "flash"): (0.0, 0.1)})["attn_impl"] == "math"
    favoured = start({("attn_impl", "flash"): (0.06, 0.1)})
    assert favoured["attn_impl"] == "flash" and favoured["compile"] == "inductor" and favoured["mbs"] == 8
    hurt = [effect("graph_compile", "on", -0.08), effect("micro_batch", "8", 0.05)]
    records, _ = search_experience(hurt, obs, envs, H200, KNOBS,
                                   base={("compile", "inductor"): (0.10, 0.1), ("attn_impl", "flash"): (0.06, 0.1)})
    (got,) = [r for r in records if "config" in r]
    assert got["config"]["compile"] == "none" and got["config"]["attn_impl"] == "flash"


def test_what_the_search_gets_does_not_depend_on_the_last_bits_of_the_measurements() -> None:
    """Step-time means and evidence fits differ in their last bits between numpy builds and CPUs (a transfer
    sweep forked on 2 of 30 seeds between Python 3.11 and 3.12 before this).  Nudged by one part in 1e14, the
    same bank hands the search the same records, every number rounded to 9 decimals."""
    ref = {"graph_compile": "off", "tensor_parallel": "1", "attention_kernel": "sdpa", "micro_batch": "1"}
    best = {"graph_compile": "on", "tensor_parallel": "4", "attention_kernel": "flash", "micro_batch": "1"}
    envs = {H20.digest(): H20, H200.digest(): H200}

    def records(nudge: float) -> list[dict]:
        obs = [_obs("ref", ref, 2.0 * nudge), _obs("best", best, 1.1234567891234 / nudge)]
        effs = [effect("graph_compile", "on", 0.1512345678912 * nudge, H20, mem=-2.0123456789 * nudge),
                effect("attention_kernel", "flash", 0.1 * nudge, H20, trial="t2")]
        return search_experience(effs, obs, envs, H200, KNOBS)[0]

    plain, nudged = records(1.0), records(1.0 + 1e-14)
    assert plain == nudged
    numbers = [v for r in plain for v in r.values() if isinstance(v, float)]
    assert len(numbers) >= 4 and all(v == round(v, 9) for v in numbers)
    start = next(r for r in plain if "config" in r)
    assert start["speedup"] == pytest.approx(2.0 / 1.1234567891234, abs=1e-9)
