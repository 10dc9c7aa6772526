"""A quiet dedicated 8x H200 node (paired noise ~0.1%): no big knob, the gain is
many sub-2% launch levers plus small verified source patches.

Patches: four small real gains, one that changes numerics (loss +5%, the
verifier's L4 rejects it) and one that crashes with torch.compile.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 141.0
GPUS = 8
REF_STEP_S = 0.95
REF_MEM_GIB = 92.0

KNOBS = [
    {"name": "fused_adamw", "values": [False, True], "reference": False, "prior_mean": {True: 0.012}},
    {"name": "pin_memory", "values": [False, True], "reference": False, "prior_mean": {True: 0.004}},
    {"name": "num_workers", "values": [2, 4, 8, 16], "reference": 2, "ordered": True,
     "prior_mean": {4: 0.004, 8: 0.006, 16: 0.004}},
    {"name": "bucket_mb", "values": [25, 50, 100], "reference": 25, "ordered": True,
     "prior_mean": {50: 0.004, 100: 0.006}},
    {"name": "cudnn_benchmark", "values": [False, True], "reference": False, "prior_mean": {True: 0.005}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.015}},
    {"name": "expandable_segments", "values": [False, True], "reference": False, "prior_mean": {True: 0.003}},
    {"name": "grad_bucket_view", "values": [False, True], "reference": False, "prior_mean": {True: 0.003}},
]
PATCHES = ["fuse_rmsnorm", "cache_rope", "inplace_residual", "fast_gelu_approx", "fused_qkv", "triton_softmax"]
PATCH_PRIORS = {"fuse_rmsnorm": 0.01, "cache_rope": 0.006, "inplace_residual": 0.004,
                "fast_gelu_approx": 0.02, "fused_qkv": 0.012, "triton_softmax": 0.015}

SPEED = {
    ("fused_adamw", True): 0.011, ("pin_memory", True): 0.003,
    ("num_workers", 4): 0.004, ("num_workers", 8): 0.006, ("num_workers", 16): 0.002,
    ("bucket_mb", 50): 0.004, ("bucket_mb", 100): 0.002,
    ("cudnn_benchmark", True): -0.002, ("torch_compile", True): 0.016,
    ("expandable_segments", True): 0.002, ("grad_bucket_view", True): 0.003,
}
PATCH_SPEED = {"fuse_rmsnorm": 0.009, "cache_rope": 0.005, "inplace_residual": 0.004, "fast_gelu_approx": 0.018,
               "fused_qkv": 0.012, "triton_softmax": 0.010}


def evaluate(config: dict, patches: list, rng) -> dict:
    if "triton_softmax" in patches and config["torch_compile"]:
        return {"status": "crash", "reason": "triton_softmax kernel fails to trace under torch.compile"}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items()) + sum(PATCH_SPEED[p] for p in patches)
    loss = 2.154 * (1.05 if "fast_gelu_approx" in patches else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.0006, step_sd=0.004)
    mem = REF_MEM_GIB - (2.0 if config["expandable_segments"] else 0.0)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
