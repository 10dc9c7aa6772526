"""Verified write-back of a real campaign (controller/experience/writeback.py): the evidence rules, renamed flags
onto mechanisms, conflicts, and idempotency under a SIGKILL half-way (a real second process on SQLite)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from infrarsi.controller.campaign.engine import parse_contract_yaml
from infrarsi.controller.experience.environment import campaign_environment, reference_state_of
from infrarsi.controller.experience.writeback import campaign_records, write_back
from infrarsi.controller.store import open_store

CONTRACT = """
name: gptish
launch: {command: "python3 train.py {knobs}", gpus_per_node: 8}
workload: {tokens_per_update: 4096, seq_len: 512, static: {model_family: gpt, params: 7.0e+9}}
trial: {updates: 8, window: [3, 8]}
memory_cap_gib: 80
knobs:
  - {name: use_fp8, values: [false, true], reference: false, mechanism: low_precision_gemm,
     apply: {flag: "--fp8={value}"}}
  - {name: attn, values: [eager, fa2, xf], reference: eager, mechanism: attention_kernel, canonical: {xf: flash},
     apply: {flag: "--attn={value}"}}
  - {name: mbs, values: [1, 2], reference: 1, kind: ordered, batch_factor: true, apply: {flag: "--mbs={value}"}}
  - {name: gas, values: [2, 1], reference: 2, batch_factor: true, apply: {flag: "--gas={value}"}}
  - {name: tp, values: [1, 2], reference: 1, kind: ordered, apply: {flag: "--tp={value}"}}
couplings: [{product: [mbs, gas], equals: 2, solve: gas}]
"""
T0 = 1.0


def _world(times: dict[str, tuple[dict, str, float | None, bool]]):
    """trials from {key: (config, outcome, step_time, accepted)}"""
    trials, obs = [], {}
    for i, (key, (cfg, outcome, step, acc)) in enumerate(times.items(), start=1):
        stage = "reference" if key.startswith("ref") else "search"
        trials.append(SimpleNamespace(id=i, trial_key=key, stage=stage, config=cfg, patches=[], outcome=outcome,
                                      status="ingested"))
        obs[i] = SimpleNamespace(step_time_s=step, peak_mem_gib=10.0 if step else None, accepted=acc,
                                 first_failed_layer=None if acc else "L3",
                                 oom_shortfall_gib=2.5 if outcome == "oom" else None)
    return trials, obs


def _records(times, promoted=None, speedup=1.0, banned=(), requirements=()):
    contract = parse_contract_yaml(CONTRACT)
    env = campaign_environment(contract)
    trials, obs = _world(times)
    result = {"reference": {"step_time_s": T0, "sigma_pair": 0.01, "big_knob_gate": 0.02, "peak_mem_gib": 10.0},
              "promoted": promoted, "delivered_speedup": speedup}
    camp = SimpleNamespace(name="gptish", id=7)
    return env, *campaign_records(contract, camp, env, trials, obs, result, banned, requirements)


def test_environment_and_reference_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_GPU_SKU", "H20")
    contract = parse_contract_yaml(CONTRACT)
    env = campaign_environment(contract, versions={"torch": "2.5.1", "cuda": "12.4", "platform": "linux"})
    assert (env.gpu_sku, env.gpus_per_node, env.nodes, env.model_family, env.params, env.seq_len) == \
        ("H20", 8, 1, "gpt", 7e9, 512)
    assert env.framework == "torch" and env.software == {"torch": "2.5.1", "cuda": "12.4"}
    assert env.parallel == "tp1-pp1-dp8" and env.gpu_mem_gib == 80
    assert reference_state_of(contract) == {"low_precision_gemm": "off", "attention_kernel": "naive",
                                            "micro_batch": "1", "grad_accum": "2", "tensor_parallel": "1"}


def test_effects_only_from_gated_single_knob_pairs() -> None:
    env, obs, effects = _records({
        "ref-a": ({}, "ok", 1.0, True),
        "fp8": ({"use_fp8": True}, "ok", 0.8, True),                   # +0.223: written (kernel)
        "xf": ({"attn": "xf"}, "ok", 0.995, True),                     # 0.005 < gate: noise, not written
        "mbs2": ({"mbs": 2}, "ok", 0.9, True),                         # gas is derived: one knob changed
        "tp2": ({"tp": 2}, "ok", 1.3, True),                           # -0.262: written (balance, tp alias)
        "fp8+fa2": ({"use_fp8": True, "attn": "fa2"}, "ok", 0.6, True),  # vs fp8: attn with fp8 as conditioning
        "rej": ({"attn": "fa2"}, "rejected", None, False),
        "unacc": ({"tp": 2, "use_fp8": True}, "ok", 0.1, False),       # not accepted: never evidence
    })
    got = {(e.mechanism, e.value, tuple(sorted(e.conditioning.items()))): e for e in effects
           if e.tier != "verified-model"}
    assert set(got) == {("low_precision_gemm", "on", ()), ("micro_batch", "2", ()), ("tensor_parallel", "2", ()),
                        ("attention_kernel", "flash", (("low_precision_gemm", "on"),))}
    fp8 = got[("low_precision_gemm", "on", ())]
    assert fp8.log_speedup == pytest.approx(math.log(1 / 0.8)) and fp8.klass == "kernel" and fp8.knob == "use_fp8"
    assert fp8.raw_value == "true" and fp8.tier == "verified-search" and fp8.noise_floor == 0.01
    assert fp8.campaign == "gptish#7" and fp8.trial == "fp8" and fp8.mem_delta_gib == 0.0
    assert got[("tensor_parallel", "2", ())].klass == "balance"
    flash = got[("attention_kernel", "flash", (("low_precision_gemm", "on"),))]
    assert flash.log_speedup == pytest.approx(math.log(0.8 / 0.6)) and flash.knob == "attn" and flash.raw_value == "fa2"
    assert len(effects) == len({e.key for e in effects})
    # the model's posterior-gated main effects come from the same verified runs (trial "model", no conditioning);
    # the fast unaccepted run (0.1 s) never counts: no model effect reaches its speed
    model = {(e.mechanism, e.value): e for e in effects if e.tier == "verified-model"}
    assert set(model) <= {("low_precision_gemm", "on"), ("micro_batch", "2"), ("tensor_parallel", "2"),
                          ("attention_kernel", "flash")}
    assert all(e.trial == "model" and e.conditioning == {} and abs(e.log_speedup) < 0.5 for e in model.values())
    assert [o.trial for o in obs] == ["ref-a", "fp8", "xf", "mbs2", "tp2", "fp8+fa2", "rej", "unacc"]
    by = {o.trial: o for o in obs}
    assert by["mbs2"].config["gas"] == 1 and by["mbs2"].canonical["grad_accum"] == "1"
    assert by["rej"].verdicts == {"outcome": "rejected", "accepted": False, "first_failed_layer": "L3"}
    assert by["rej"].step_time_s is None and by["fp8"].canonical["low_precision_gemm"] == "on"


def test_conflicts_and_promotion_rerun() -> None:
    promoted = {"config": {"use_fp8": True, "attn": "eager", "mbs": 1, "gas": 2, "tp": 1},
                "changed": {"use_fp8": [False, True]}, "patches": []}
    _, obs, effects = _records({
        "ref-a": ({}, "ok", 1.0, True),
        "crash": ({"tp": 2, "attn": "fa2"}, "crash", None, False),
        "oom": ({"mbs": 2}, "oom", None, False),
    }, promoted=promoted, speedup=1.25, banned=[(("attn", "fa2"), ("tp", 2))])
    by = {o.trial: o for o in obs}
    assert by["crash"].conflicts == ((("attention_kernel", "flash"), ("tensor_parallel", "2")),)
    assert by["oom"].oom_shortfall_gib == 2.5 and by["oom"].conflicts == ()
    (rerun,) = effects
    assert (rerun.tier, rerun.mechanism, rerun.value, rerun.trial) == ("verified-rerun", "low_precision_gemm", "on",
                                                                       "promotion")
    assert rerun.log_speedup == pytest.approx(math.log(1.25))


def test_requirements_are_written_on_the_crashes_that_broke_them() -> None:
    """The ledger's "FP8 needs TP2" goes on the crash that held FP8 at TP1, in mechanism terms, and on nothing
    else: not on the passing run, not on a crash that held the partner, not on one without the setting."""
    need = [(("use_fp8", True), ("tp", 2))]
    _, obs, _ = _records({
        "ref-a": ({}, "ok", 1.0, True),
        "fp8-tp2": ({"use_fp8": True, "tp": 2}, "ok", 0.8, True),
        "fp8-tp1": ({"use_fp8": True, "attn": "xf"}, "crash", None, False),
        "fp8-tp2-crash": ({"use_fp8": True, "tp": 2, "mbs": 2}, "crash", None, False),
        "attn": ({"attn": "fa2"}, "crash", None, False),
    }, requirements=need)
    by = {o.trial: o.requirements for o in obs}
    assert by["fp8-tp1"] == ((("low_precision_gemm", "on"), ("tensor_parallel", "2")),)
    assert by["fp8-tp2"] == by["fp8-tp2-crash"] == by["attn"] == by["ref-a"] == ()


WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.experience.test_writeback import _records, BIG
from infrarsi.controller.experience.writeback import write_back
from infrarsi.controller.store import open_store
env, obs, effects = _records(BIG)
print(write_back(open_store({url!r}, auto_upgrade=True), None, env, obs, effects))
"""
BIG = {"ref-a": ({}, "ok", 1.0, True), "fp8": ({"use_fp8": True}, "ok", 0.8, True),
       "tp2": ({"tp": 2}, "ok", 1.3, True), "mbs2": ({"mbs": 2}, "ok", 0.9, True)}


def test_sigkill_mid_write_back_then_rerun_duplicates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bank.sqlite'}"
    root = str(Path(__file__).resolve().parents[2])
    script = WRITER.format(root=root, url=url)
    env = {**os.environ, "INFRARSI_CRASH_AT": "in_writeback"}
    crashed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    store = open_store(url)
    assert len(store.experience_observations()) == 4 and store.effects() == []  # killed between the two writes
    env.pop("INFRARSI_CRASH_AT")
    for _ in range(2):  # the re-run completes; a third run writes nothing
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert "{'observations': 0, 'effects': 0}" in done.stdout
    effects = store.effects()
    assert sorted((e.mechanism, e.value) for e in effects) == [("low_precision_gemm", "on"), ("micro_batch", "2"),
                                                               ("tensor_parallel", "2")]
    assert len(store.experience_observations()) == 4 and len(store.environments()) == 1
    _, obs, again = _records(BIG)
    assert write_back(store, None, again[0].env, obs, again) == {"observations": 0, "effects": 0}


class _RefusingStore:
    """A store whose role lacks the bank's grants: trials and observations read, every bank write refused."""

    def __init__(self, trials, obs) -> None:
        self.trials, self.obs = trials, obs

    def list_trials(self, campaign_id: int):
        return list(self.trials)

    def observations(self, campaign_id: int):
        return dict(self.obs)

    def receipt_raw(self, trial_id: int):
        return None

    def add_environment(self, env):
        from infrarsi.controller.errors import StoreError

        raise StoreError("permission denied for table exp_environments")


def test_a_refused_write_back_does_not_fail_the_report() -> None:
    # the real write-back (writeback.write_campaign_experience) over a store that refuses the bank's tables, called
    # the way the report calls it (engine.write_experience): the refusal is one progress line, never an exception
    from infrarsi.controller.campaign.engine import write_experience

    contract = parse_contract_yaml(CONTRACT)
    trials, obs = _world(BIG)
    said: list[str] = []
    engine = SimpleNamespace(contract=lambda c: contract, store=_RefusingStore(trials, obs), progress=said.append,
                             settings=SimpleNamespace(master_key=lambda: b"k"), search_for=lambda c: None)
    campaign = SimpleNamespace(id=3, name="gptish", doctor=None)
    result = {"reference": {"step_time_s": T0, "sigma_pair": 0.01, "big_knob_gate": 0.02, "peak_mem_gib": 10.0},
              "promoted": None, "delivered_speedup": 1.0}
    write_experience(engine, campaign, result)
    assert said == ["[3] experience write-back refused: permission denied for table exp_environments"]


def test_the_report_write_back_counts_what_it_stored(tmp_path: Path) -> None:
    from infrarsi.controller.campaign.engine import write_experience

    contract = parse_contract_yaml(CONTRACT)
    trials, obs = _world(BIG)
    store = open_store(f"sqlite:///{tmp_path / 'bank.sqlite'}", auto_upgrade=True)
    reads = SimpleNamespace(list_trials=lambda cid: trials, observations=lambda cid: obs,
                            receipt_raw=lambda tid: None, add_environment=store.add_environment,
                            add_observations=store.add_observations, add_effects=store.add_effects)
    said: list[str] = []
    engine = SimpleNamespace(contract=lambda c: contract, store=reads, progress=said.append,
                             settings=SimpleNamespace(master_key=lambda: b"k"), search_for=lambda c: None)
    campaign = SimpleNamespace(id=None, name="gptish", doctor=None)
    result = {"reference": {"step_time_s": T0, "sigma_pair": 0.01, "big_knob_gate": 0.02, "peak_mem_gib": 10.0},
              "promoted": None, "delivered_speedup": 1.0}
    write_experience(engine, campaign, result)
    assert len(said) == 1 and said[0].startswith("[None] experience bank: ") and "4 observations" in said[0]
    assert len(store.experience_observations()) == 4 and store.effects()
    write_experience(engine, campaign, result)  # idempotent: nothing new, nothing said
    assert len(said) == 1
