"""Result dicts shaped exactly like the engine's ``result.json`` (schema ``infrarsi.result/1``)."""

from __future__ import annotations

from typing import Any

import pytest

LAYERS = ("L0", "L1", "L2", "L3", "L4", "L5")
REF_CFG = {"micro_batch": 1, "grad_accum": 16, "dtype": "fp32"}


def _trial(seq: int, stage: str, outcome: str, step: float | None, ref_step: float, cum: float, *,
           changed: dict[str, list[Any]] | None = None, patches: list[str] | None = None,
           layer: str | None = None, reason: str = "") -> dict[str, Any]:
    cfg = dict(REF_CFG)
    for k, (_, new) in (changed or {}).items():
        cfg[k] = new
    gh = 0.001 * (seq % 3 + 1)
    return {"seq": seq, "stage": stage, "config": cfg, "changed": changed or {}, "patches": patches or [],
            "outcome": outcome, "reason": reason, "step_time_s": step,
            "speedup": None if step is None else ref_step / step, "peak_mem_gib": None if step is None else 1.1,
            "gpu_hours": gh, "cum_gpu_hours": cum + gh, "first_failed_layer": layer,
            "accepted": outcome == "ok", "isolation": "bwrap"}


def _trials(ref_step: float, specs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out, cum = [], 0.0
    for i, spec in enumerate(specs, start=1):
        stage, outcome, step, kw = spec
        t = _trial(i, stage, outcome, step, ref_step, cum, **kw)
        cum = t["cum_gpu_hours"]
        out.append(t)
    return out


def _verdicts(n: int = 17) -> list[dict[str, Any]]:
    names = ["completes", "no_errors", "memory_cap", "same_workload", "same_data", "same_model", "frozen_files",
             "optimizer_steps", "loss_within_tolerance", "grad_norm_within_tol", "eval_matches", "precision",
             "timing_consistent", "speed_reproduces", "resume_continues", "user_tests", "executor_clock"]
    layers = ["L1"] * 3 + ["L2"] * 4 + ["L3"] + ["L4"] * 4 + ["L5"] * 5
    return [{"invariant": names[i], "layer": layers[i], "status": "pass" if i != 14 else "unchecked",
             "required": i != 14, "reason": f"checked {names[i]}"} for i in range(n)]


def _base(ref_step: float, trials: list[dict[str, Any]]) -> dict[str, Any]:
    total = sum(t["gpu_hours"] for t in trials)
    failed = sum(t["gpu_hours"] for t in trials if t["outcome"] in ("oom", "crash", "timeout"))
    rejected = sum(t["gpu_hours"] for t in trials if t["outcome"] == "rejected")
    counts = {k: 0 for k in LAYERS}
    for t in trials:
        if t["outcome"] == "rejected":
            counts[t["first_failed_layer"]] += 1
    return {
        "schema": "infrarsi.result/1",
        "invariant_count": 17,
        "campaign": {"id": 7, "name": "nanogpt-tiny", "owner": "alice", "state": "done", "contract_digest": "ab" * 32,
                     "repo": "/srv/repo", "commit": "abc123", "executor": "local",
                     "created_at": "2026-11-29T20:00:00Z", "finished_at": "2026-11-29T21:00:00Z"},
        "reference": {"config": dict(REF_CFG), "step_time_s": ref_step, "sigma_pair": 0.003,
                      "promotion_margin": 0.006018, "big_knob_gate": 0.02,
                      "phases": {"forward": 0.05, "backward": 0.1, "optimizer": 0.03, "data": 0.01},
                      "peak_mem_gib": 1.2, "reference_window_means": [0.21, 0.211, 0.209]},
        "trials": trials,
        "rejections_by_layer": counts,
        "refused_patches": {},
        "cost": {"by_stage": [{"stage": "search", "failure_class": None, "entries": len(trials), "gpu_hours": total,
                               "llm_tokens": 0}],
                 "total_gpu_hours": total, "failed_gpu_hours": failed, "rejected_gpu_hours": rejected,
                 "budget_gpu_hours": 1.0, "share_of_budget": total / 1.0},
        "memory_table": [],
        "search": {"big_knobs": ["micro_batch"]},
        "promotion": {"pairs": [], "speed_reproduces": None, "promotion_margin": 0.006018, "rejected_reruns": []},
    }


def make_promoted_result() -> dict[str, Any]:
    """A campaign that promoted micro_batch 1->16 plus a fused-QKV patch, with MFU and memory data."""
    ref = 0.21
    trials = _trials(ref, [
        ("reference", "ok", 0.21, {}),
        ("search", "ok", 0.15, {"changed": {"micro_batch": [1, 4]}}),
        ("search", "oom", None, {"changed": {"micro_batch": [1, 32]}, "reason": "CUDA out of memory"}),
        ("search", "ok", 0.114, {"changed": {"micro_batch": [1, 16]},
                                 "patches": ["fused_qkv.diff"]}),
        ("promotion", "ok", 0.21, {}),
        ("promotion", "ok", 0.1141, {"changed": {"micro_batch": [1, 16]}, "patches": ["fused_qkv.diff"]}),
    ])
    r = _base(ref, trials)
    speedup = ref / 0.114
    r["delivered_speedup"] = speedup
    r["reason"] = f"promoted: paired speedup {speedup:.2f}x clears margin 0.6%"
    r["promoted"] = {"config": {**REF_CFG, "micro_batch": 16}, "changed": {"micro_batch": [1, 16]},
                     "patches": ["fused_qkv.diff"],
                     "diff": ("--- a/model.py\n+++ b/model.py\n@@ -1 +1 @@\n"
                              "-q = self.q(x); k = self.k(x)\n+qkv = self.qkv(x)\n"),
                     "step_time_s": 0.114, "speedup": speedup, "verdicts": _verdicts()}
    fpt, tok, peak = 6.0e8, 65536, 989.5e12
    r["mfu"] = {"formula": "MFU = tokens/s x flops_per_token / (devices x peak)", "flops_per_token": fpt,
                "tokens_per_update": tok, "devices": 1, "peak_flops": peak,
                "before": tok * fpt / (peak * ref), "after": tok * fpt / (peak * 0.114)}
    r["memory_table"] = [{"name": "micro_batch", "value": 16, "gib": 0.4, "sd": 0.1, "class": "spender"},
                         {"name": "activation_checkpointing", "value": True, "gib": -0.3, "sd": 0.05, "class": "saver"}]
    r["promotion"]["pairs"] = [{"group": "deadbeef:0", "reference_trial": 5, "candidate_trial": 6,
                                "reference_s": 0.21, "candidate_s": 0.1141, "candidate_outcome": "ok",
                                "reason": "accepted"}]
    r["promotion"]["speed_reproduces"] = {"name": "speed_reproduces", "layer": "L5", "status": "pass",
                                          "reason": "paired speedup 1.84x > margin 0.6%"}
    return r


def make_null_result() -> dict[str, Any]:
    """A 1.00x campaign: nothing promoted, MFU unknown, no memory data, cost fields null."""
    ref = 0.2
    trials = _trials(ref, [("reference", "ok", 0.2, {}),
                           ("search", "ok", 0.201, {"changed": {"dtype": ["fp32", "bf16"]}})])
    r = _base(ref, trials)
    r.update(delivered_speedup=1.0, reason="no candidate beat the promotion margin 0.6%", promoted=None, mfu=None,
             memory_table=None, refused_patches=None, rejections_by_layer=None, search=None)
    r["cost"] = {"by_stage": [], "total_gpu_hours": None, "failed_gpu_hours": None, "rejected_gpu_hours": None,
                 "budget_gpu_hours": None, "share_of_budget": None}
    r["reference"].update(sigma_pair=None, promotion_margin=None, big_knob_gate=None, phases=None,
                          peak_mem_gib=None, reference_window_means=None)
    r["promotion"] = None
    return r


def make_rejected_result() -> dict[str, Any]:
    """A campaign with verifier rejections at L2 and L4, OOMs, a crash, a timeout and a refused patch."""
    ref = 0.3
    trials = _trials(ref, [
        ("reference", "ok", 0.3, {}),
        ("search", "rejected", 0.1, {"changed": {"grad_accum": [16, 8]}, "layer": "L2",
                                     "reason": "update 1: 32768 tokens, expected 65536"}),
        ("search", "oom", None, {"changed": {"micro_batch": [1, 64]}, "reason": "CUDA out of memory"}),
        ("search", "oom", None, {"changed": {"micro_batch": [1, 32]}, "reason": "CUDA out of memory"}),
        ("search", "rejected", None, {"patches": ["skip_norm.diff"], "layer": "L4",
                                      "reason": "window loss 3.1 vs reference 2.9 beyond tolerance 3%"}),
        ("search", "crash", None, {"patches": ["bad.diff"], "reason": "exit code 1 after 0/30 updates"}),
        ("search", "timeout", None, {"changed": {"dtype": ["fp32", "bf16"]}, "reason": "timed out"}),
        ("search", "ok", 0.27, {"changed": {"dtype": ["fp32", "bf16"]}}),
    ])
    r = _base(ref, trials)
    r.update(delivered_speedup=1.0, reason="the only candidate's re-runs did not reproduce its speedup",
             promoted=None, mfu=None)
    r["refused_patches"] = {"touch_data.diff": "patch touches frozen file data.py | loader"}
    r["cost"]["by_stage"] = [
        {"stage": "search", "failure_class": None, "entries": 3, "gpu_hours": 0.004, "llm_tokens": 1200},
        {"stage": "search", "failure_class": "oom", "entries": 2, "gpu_hours": 0.003, "llm_tokens": 0},
        {"stage": "search", "failure_class": "rejected", "entries": 2, "gpu_hours": 0.005, "llm_tokens": 0}]
    return r


@pytest.fixture
def promoted_result() -> dict[str, Any]:
    return make_promoted_result()


@pytest.fixture
def null_result() -> dict[str, Any]:
    return make_null_result()


@pytest.fixture
def rejected_result() -> dict[str, Any]:
    return make_rejected_result()
