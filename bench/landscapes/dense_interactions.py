"""Dense GPT on one 8x H200 node with naive research defaults (modelled on
docs/measurements.md: fp32, naive attention, eager, loop AdamW, micro-batch
4 x 16 accumulation, activation checkpointing).

Knobs interact strongly: single flips give 1.1-1.65x each and multiply to
~4x, while the joint configuration reaches ~14x (bf16 enables FlashAttention
and makes compile and large micro-batches pay).  FlashAttention crashes
without bf16; FP8 is fast but moves the loss beyond tolerance (rejected);
large micro-batches without recomputation run out of memory in fp32 with
naive attention.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 141.0
GPUS = 8
REF_STEP_S = 5.2
REF_MEM_GIB = 40.0

KNOBS = [
    {"name": "precision", "values": ["fp32", "tf32", "bf16", "fp8"], "reference": "fp32",
     "prior_mean": {"tf32": 0.2, "bf16": 0.4, "fp8": 0.5}, "mem_prior_gib": {"bf16": -10.0, "fp8": -14.0}},
    {"name": "attention", "values": ["naive", "sdpa", "flash"], "reference": "naive",
     "prior_mean": {"sdpa": 0.15, "flash": 0.3}, "mem_prior_gib": {"sdpa": -5.0, "flash": -8.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.15},
     "mem_prior_gib": {True: -3.0}},
    {"name": "optimizer", "values": ["loop", "foreach", "fused"], "reference": "loop",
     "prior_mean": {"foreach": 0.05, "fused": 0.08}},
    {"name": "micro_batch", "values": ["4x16", "8x8", "16x4"], "reference": "4x16", "ordered": True,
     "prior_mean": {"8x8": 0.06, "16x4": 0.1}, "mem_prior_gib": {"8x8": 20.0, "16x4": 45.0}},
    {"name": "recompute", "values": [True, False], "reference": True, "prior_mean": {False: 0.15},
     "mem_prior_gib": {False: 35.0}},
    {"name": "pin_memory", "values": [False, True], "reference": False, "prior_mean": {True: 0.005}},
    {"name": "num_workers", "values": [2, 4, 8], "reference": 2, "ordered": True,
     "prior_mean": {4: 0.005, 8: 0.005}},
]

SPEED = {
    ("precision", "tf32"): 0.30, ("precision", "bf16"): 0.50, ("precision", "fp8"): 0.62,
    ("attention", "sdpa"): 0.18, ("attention", "flash"): 0.22,
    ("torch_compile", True): 0.20,
    ("optimizer", "foreach"): 0.06, ("optimizer", "fused"): 0.10,
    ("micro_batch", "8x8"): 0.14, ("micro_batch", "16x4"): 0.25,
    ("recompute", False): 0.18,
    ("pin_memory", True): 0.003, ("num_workers", 4): 0.004, ("num_workers", 8): 0.002,
}
MEM = {
    ("precision", "bf16"): -12.0, ("precision", "fp8"): -16.0,
    ("attention", "sdpa"): -6.0, ("attention", "flash"): -10.0,
    ("torch_compile", True): -4.0,
    ("micro_batch", "8x8"): 25.0, ("micro_batch", "16x4"): 60.0,
    ("recompute", False): 50.0,
}
LOW_PRECISION = ("bf16", "fp8")


def evaluate(config: dict, patches: list, rng) -> dict:
    low = config["precision"] in LOW_PRECISION
    if config["attention"] == "flash" and not low:
        return {"status": "crash", "reason": "FlashAttention only supports fp16/bf16 inputs"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    compiled = config["torch_compile"]
    big_mb = config["micro_batch"] == "16x4"
    if low and config["attention"] == "flash":
        logsp += 0.30   # tensor-core attention only pays once activations are bf16
    if low and compiled:
        logsp += 0.25   # compile fuses the casts and elementwise chains
    if compiled and config["optimizer"] == "fused":
        logsp += 0.10
    if low and big_mb:
        logsp += 0.20   # large bf16 GEMMs reach the tensor-core roofline
    if compiled and not config["recompute"]:
        logsp += 0.15
    if big_mb and config["attention"] == "flash":
        logsp += 0.15
    loss = 3.412 * (1.045 if config["precision"] == "fp8" else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.012, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
