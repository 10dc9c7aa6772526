"""Held-out landscape (written 2026-11-30 after the batch changes of issue 15; not tuned on).

A ViT-L image model with DDP on 8x A100 40 GiB whose input pipeline is the bottleneck: the data-loader
levers (workers, decode on GPU, pinned memory) are rated small by the priors but carry most of the gain,
while the compute levers the priors favour (bf16, compile, fused attention) only pay once the input
pipeline keeps up.  GPU decoding (DALI) conflicts with torch.compile's CUDA graphs (a crash); channels-last
has no stated prior.  Larger batches need bf16 or checkpointing to fit.  Moderate noise.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 40.0
GPUS = 8
REF_STEP_S = 1.4
REF_MEM_GIB = 26.0

KNOBS = [
    {"name": "precision", "values": ["fp32", "bf16"], "reference": "fp32", "prior_mean": {"bf16": 0.30},
     "mem_prior_gib": {"bf16": -6.0}},
    {"name": "torch_compile", "values": ["off", "default", "max_autotune"], "reference": "off",
     "prior_mean": {"default": 0.08, "max_autotune": 0.12}},
    {"name": "attention", "values": ["math", "sdpa"], "reference": "math", "prior_mean": {"sdpa": 0.10},
     "mem_prior_gib": {"sdpa": -3.0}},
    {"name": "num_workers", "values": [4, 8, 16], "reference": 4, "ordered": True,
     "prior_mean": {8: 0.01, 16: 0.015}},
    {"name": "gpu_decode", "values": [False, True], "reference": False, "prior_mean": {True: 0.02},
     "mem_prior_gib": {True: 2.0}},
    {"name": "pin_memory", "values": [False, True], "reference": False, "prior_mean": {True: 0.005}},
    {"name": "channels_last", "values": [False, True], "reference": False},
    {"name": "batch_per_gpu", "values": [32, 64, 128], "reference": 32, "ordered": True,
     "prior_mean": {64: 0.04, 128: 0.06}, "mem_prior_gib": {64: 8.0, 128: 20.0}},
    {"name": "checkpointing", "values": [False, True], "reference": False, "prior_mean": {True: -0.05},
     "mem_prior_gib": {True: -10.0}},
]


def _input_rate(config: dict) -> float:
    """Images/s per GPU the input pipeline can feed (log units relative to the reference)."""
    r = {4: 0.0, 8: 0.35, 16: 0.55}[config["num_workers"]]
    r += 0.45 if config["gpu_decode"] else 0.0
    r += 0.05 if config["pin_memory"] else 0.0
    return r


def _compute_rate(config: dict) -> float:
    c = 0.0
    c += 0.40 if config["precision"] == "bf16" else 0.0
    c += {"off": 0.0, "default": 0.10, "max_autotune": 0.14}[config["torch_compile"]]
    c += 0.12 if config["attention"] == "sdpa" else 0.0
    c += 0.06 if config["channels_last"] else 0.0
    c += {32: 0.0, 64: 0.05, 128: 0.08}[config["batch_per_gpu"]]
    c -= 0.18 if config["checkpointing"] else 0.0
    return c


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["gpu_decode"] and config["torch_compile"] == "max_autotune":
        return {"status": "crash", "reason": "CUDA graph capture: DALI stream is not capturable"}
    mem = REF_MEM_GIB + (-6.0 if config["precision"] == "bf16" else 0.0) + (-3.0 if config["attention"] == "sdpa"
                                                                           else 0.0)
    mem += {32: 0.0, 64: 9.0, 128: 22.0}[config["batch_per_gpu"]] * (0.5 if config["checkpointing"] else 1.0)
    mem += 2.0 if config["gpu_decode"] else 0.0
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    # the step runs at the slower of the input pipeline and the compute (the reference is input bound
    # by 0.15 log units: compute alone could run 0.15 faster)
    logsp = min(_input_rate(config), 0.15 + _compute_rate(config))
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.007, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 1.77}
