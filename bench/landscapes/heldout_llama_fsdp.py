"""Held-out landscape (written 2026-11-30 after the hedged first slots of issue 15; not tuned on).

Llama-style 8B model trained with FSDP on 8x H100 80 GiB.  bf16 parameters are the biggest lever and free
memory; FlashAttention-3 pays more once parameters are bf16; turning activation checkpointing off is a large
gain that needs memory (grad-op sharding spends memory too); torch.compile crashes with selective
checkpointing (the selective policy cannot be traced); ``limit_all_gathers`` is rated positive but slows this
job down.  Moderate noise.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 8
REF_STEP_S = 3.6
REF_MEM_GIB = 50.0

KNOBS = [
    {"name": "param_dtype", "values": ["fp32", "bf16"], "reference": "fp32", "prior_mean": {"bf16": 0.35},
     "mem_prior_gib": {"bf16": -6.0}},
    {"name": "sharding", "values": ["full", "hybrid", "grad_op"], "reference": "full",
     "prior_mean": {"hybrid": 0.06, "grad_op": 0.10}, "mem_prior_gib": {"hybrid": 6.0, "grad_op": 14.0}},
    {"name": "activation_ckpt", "values": ["full", "selective", "off"], "reference": "full", "ordered": True,
     "prior_mean": {"selective": 0.06, "off": 0.14}, "mem_prior_gib": {"selective": 8.0, "off": 20.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.10}},
    {"name": "attention", "values": ["sdpa", "flash3"], "reference": "sdpa", "prior_mean": {"flash3": 0.10},
     "mem_prior_gib": {"flash3": -2.0}},
    {"name": "micro_batch", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "prior_mean": {2: 0.04, 4: 0.07}, "mem_prior_gib": {2: 8.0, 4: 20.0}},
    {"name": "fused_adamw", "values": [False, True], "reference": False, "prior_mean": {True: 0.02}},
    {"name": "limit_all_gathers", "values": [False, True], "reference": False, "prior_mean": {True: 0.01}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "prior_mean": {8: 0.005}},
]

SPEED = {
    ("param_dtype", "bf16"): 0.45, ("sharding", "hybrid"): 0.04, ("sharding", "grad_op"): 0.12,
    ("activation_ckpt", "selective"): 0.08, ("activation_ckpt", "off"): 0.20, ("torch_compile", True): 0.10,
    ("attention", "flash3"): 0.07, ("micro_batch", 2): 0.05, ("micro_batch", 4): 0.08,
    ("fused_adamw", True): 0.03, ("limit_all_gathers", True): -0.01, ("num_workers", 8): 0.003,
}
MEM = {
    ("param_dtype", "bf16"): -6.0, ("sharding", "hybrid"): 6.0, ("sharding", "grad_op"): 14.0,
    ("activation_ckpt", "selective"): 8.0, ("activation_ckpt", "off"): 20.0, ("attention", "flash3"): -2.0,
    ("micro_batch", 2): 8.0, ("micro_batch", 4): 20.0,
}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["torch_compile"] and config["activation_ckpt"] == "selective":
        return {"status": "crash", "reason": "dynamo: selective checkpoint policy is not traceable"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["param_dtype"] == "bf16" and config["attention"] == "flash3":
        logsp += 0.10  # FA3's tensor-core path only with bf16 inputs
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.008, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 1.98}
