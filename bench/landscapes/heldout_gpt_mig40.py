"""Held-out landscape (written 2026-11-30, before any batch/async tuning; not tuned on).

GPT-style dense model on 4x H200 MIG slices with a 40 GiB cap.  Precision is the
biggest lever and also frees memory; SDPA/flash attention help only in bf16
(flash in fp32 crashes); dropping activation checkpointing is a large gain that
only fits at small micro-batches or in bf16; torch.compile adds a super-additive
gain on top of SDPA/flash.  Larger micro-batches help throughput but spend memory.
Noise: a shared-node run-level offset.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 40.0
GPUS = 4
REF_STEP_S = 2.40
REF_MEM_GIB = 27.0
TRIAL_UPDATES = 30
TRIAL_OVERHEAD_S = 120.0

KNOBS = [
    {"name": "precision", "values": ["fp32", "bf16"], "reference": "fp32",
     "prior_mean": {"bf16": 0.45}, "mem_prior_gib": {"bf16": -8.0}},
    {"name": "attention", "values": ["naive", "sdpa", "flash"], "reference": "naive",
     "prior_mean": {"sdpa": 0.15, "flash": 0.25}, "mem_prior_gib": {"sdpa": -3.0, "flash": -5.0}},
    {"name": "compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.10},
     "mem_prior_gib": {True: 1.0}},
    {"name": "checkpointing", "values": [True, False], "reference": True, "prior_mean": {False: 0.15},
     "mem_prior_gib": {False: 12.0}},
    {"name": "fused_adamw", "values": [False, True], "reference": False, "prior_mean": {True: 0.03}},
    {"name": "tf32", "values": [False, True], "reference": False, "prior_mean": {True: 0.10}},
    {"name": "micro_batch", "values": [2, 4, 8, 16], "reference": 2, "ordered": True,
     "prior_mean": {4: 0.04, 8: 0.07, 16: 0.09}, "mem_prior_gib": {4: 4.0, 8: 10.0, 16: 22.0}},
]

SPEED = {
    ("precision", "bf16"): 0.70, ("attention", "sdpa"): 0.10, ("attention", "flash"): 0.16,
    ("compile", True): 0.08, ("checkpointing", False): 0.28, ("fused_adamw", True): 0.04,
    ("tf32", True): 0.12, ("micro_batch", 4): 0.05, ("micro_batch", 8): 0.09, ("micro_batch", 16): 0.11,
}
MEM = {
    ("precision", "bf16"): -9.0, ("attention", "sdpa"): -3.0, ("attention", "flash"): -5.0, ("compile", True): 1.5,
    ("checkpointing", False): 14.0, ("micro_batch", 4): 4.0, ("micro_batch", 8): 11.0, ("micro_batch", 16): 24.0,
}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["attention"] == "flash" and config["precision"] == "fp32":
        return {"status": "crash", "reason": "flash attention requires fp16/bf16 inputs"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if not config["checkpointing"]:
        mem += 0.5 * MEM.get(("micro_batch", config["micro_batch"]), 0.0)  # activations scale with the batch
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["precision"] == "bf16":
        logsp -= SPEED[("tf32", True)] if config["tf32"] else 0.0  # tf32 only matters for fp32 matmuls
        if config["attention"] != "naive":
            logsp += 0.08  # fused attention kernels shine in bf16
    if config["compile"] and config["attention"] != "naive":
        logsp += 0.05
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.008, step_sd=0.012)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 3.05}
