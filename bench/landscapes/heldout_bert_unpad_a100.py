"""Held-out landscape (written 2026-12-01 in session 7, after the crash-suspicion filter; not tuned on).

BERT-large masked-LM pretraining at sequence length 512 on one node of 8x A100 40 GiB.  Mixed precision is
the big lever (fp16 and bf16 alike).  Removing padding (varlen batches) is rated small but is a large gain,
and it needs the flash-attention kernel: unpadded batches under the default attention crash.  torch.compile
is rated well but recompiles on every new varlen shape until it gives up (a crash with unpadding).  The
fused LAMB kernel's fp16 path drifts the loss (an L4 rejection); with bf16 it is fine.  Flash attention pays
less than its prior at this short sequence.  Large micro-batches need activation checkpointing, which costs
more than it buys.  Moderate noise.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 40.0
GPUS = 8
REF_STEP_S = 0.9
REF_MEM_GIB = 24.0

KNOBS = [
    {"name": "precision", "values": ["fp32", "fp16", "bf16"], "reference": "fp32",
     "prior_mean": {"fp16": 0.28, "bf16": 0.30}, "mem_prior_gib": {"fp16": -6.0, "bf16": -6.0}},
    {"name": "fused_lamb", "values": [False, True], "reference": False, "prior_mean": {True: 0.05}},
    {"name": "micro_batch", "values": [8, 16, 32, 64], "reference": 8, "ordered": True,
     "prior_mean": {16: 0.04, 32: 0.07, 64: 0.08}, "mem_prior_gib": {16: 6.0, 32: 14.0, 64: 30.0}},
    {"name": "flash_attn", "values": [False, True], "reference": False, "prior_mean": {True: 0.10},
     "mem_prior_gib": {True: -3.0}},
    {"name": "unpad", "values": [False, True], "reference": False, "prior_mean": {True: 0.02}},
    {"name": "compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.08}},
    {"name": "grad_ckpt", "values": [False, True], "reference": False, "prior_mean": {True: -0.10},
     "mem_prior_gib": {True: -12.0}},
    {"name": "ddp_bucket_mb", "values": [25, 50, 200], "reference": 25, "ordered": True},
    {"name": "static_graph", "values": [False, True], "reference": False, "prior_mean": {True: 0.01}},
]

SPEED = {
    ("precision", "fp16"): 0.45, ("precision", "bf16"): 0.44, ("fused_lamb", True): 0.06,
    ("micro_batch", 16): 0.05, ("micro_batch", 32): 0.08, ("micro_batch", 64): 0.09,
    ("flash_attn", True): 0.04, ("unpad", True): 0.14, ("compile", True): 0.06, ("grad_ckpt", True): -0.20,
    ("ddp_bucket_mb", 50): 0.01, ("ddp_bucket_mb", 200): 0.02, ("static_graph", True): 0.01,
}
MEM = {
    ("precision", "fp16"): -6.0, ("precision", "bf16"): -6.0, ("micro_batch", 16): 5.0, ("micro_batch", 32): 13.0,
    ("micro_batch", 64): 29.0, ("flash_attn", True): -3.0, ("unpad", True): -2.0, ("grad_ckpt", True): -12.0,
}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["unpad"] and not config["flash_attn"]:
        return {"status": "crash", "reason": "unpadded batches need a varlen attention kernel"}
    if config["unpad"] and config["compile"]:
        return {"status": "crash", "reason": "torch._dynamo hit the recompile limit on varlen shapes"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 1.92 * (1.03 if config["fused_lamb"] and config["precision"] == "fp16" else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.01, step_sd=0.015)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
