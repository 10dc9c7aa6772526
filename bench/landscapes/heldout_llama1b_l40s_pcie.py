"""Held-out landscape (written 2026-12-07, session 32, after the slots-8 spread rule of session 31; committed
before it was ever measured; not to be tuned on).

A 1.3B Llama-style model trained with DeepSpeed ZeRO on one node of 8x L40S 48 GiB joined by PCIe only (no
NVLink).  Communication is the bottleneck the priors underrate: ZeRO-3's parameter all-gathers over PCIe cost
far more than its memory saving is worth, ZeRO-1 beats the reference ZeRO-2, overlapping communication and a
larger reduce bucket pay more than rated, and a source patch that compresses gradients to bf16 for the
all-reduce (rated small) halves the traffic.  Compute levers pay less than rated on the L40S (torch.compile,
FP8).  Liger's fused kernels (RMSNorm, SwiGLU, cross-entropy without materialised logits) are a real gain and
free memory, but crash under torch.compile (a recompile-limit error); FP8 weights cannot be partitioned by
ZeRO-3 (a crash).  Activation checkpointing off and larger micro-batches need the memory that Liger and flash
attention free.  Moderate noise.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 48.0
GPUS = 8
REF_STEP_S = 1.6
REF_MEM_GIB = 30.0

KNOBS = [
    {"name": "zero_stage", "values": [1, 2, 3], "reference": 2, "ordered": True,
     "prior_mean": {1: 0.02, 3: -0.05}, "mem_prior_gib": {1: 6.0, 3: -8.0}},
    {"name": "overlap_comm", "values": [False, True], "reference": False, "prior_mean": {True: 0.03}},
    {"name": "reduce_bucket_size", "values": [50_000_000, 200_000_000, 500_000_000], "reference": 50_000_000,
     "ordered": True, "prior_mean": {200_000_000: 0.01, 500_000_000: 0.02},
     "mem_prior_gib": {200_000_000: 1.0, 500_000_000: 3.0}},
    {"name": "activation_checkpointing", "values": ["full", "selective", "off"], "reference": "full",
     "ordered": True, "prior_mean": {"selective": 0.05, "off": 0.10},
     "mem_prior_gib": {"selective": 6.0, "off": 14.0}},
    {"name": "micro_batch", "values": [2, 4, 8], "reference": 2, "ordered": True,
     "prior_mean": {4: 0.04, 8: 0.06}, "mem_prior_gib": {4: 8.0, 8: 24.0}},
    {"name": "attention", "values": ["sdpa", "flash2"], "reference": "sdpa", "prior_mean": {"flash2": 0.10},
     "mem_prior_gib": {"flash2": -3.0}},
    {"name": "liger_kernels", "values": [False, True], "reference": False, "prior_mean": {True: 0.04},
     "mem_prior_gib": {True: -4.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.08}},
    {"name": "fp8", "values": [False, True], "reference": False, "prior_mean": {True: 0.10},
     "mem_prior_gib": {True: -1.0}},
    {"name": "dataloader_workers", "values": [2, 8], "reference": 2, "prior_mean": {8: 0.01}},
]

PATCHES = ["bf16_grad_allreduce", "fused_rope"]
PATCH_PRIORS = {"bf16_grad_allreduce": 0.02, "fused_rope": 0.01}

SPEED = {
    ("zero_stage", 1): 0.04, ("zero_stage", 3): -0.10,
    ("overlap_comm", True): 0.06,
    ("reduce_bucket_size", 200_000_000): 0.03, ("reduce_bucket_size", 500_000_000): 0.02,
    ("activation_checkpointing", "selective"): 0.05, ("activation_checkpointing", "off"): 0.09,
    ("micro_batch", 4): 0.05, ("micro_batch", 8): 0.07,
    ("attention", "flash2"): 0.08,
    ("liger_kernels", True): 0.06,
    ("torch_compile", True): 0.03,
    ("fp8", True): 0.02,
    ("dataloader_workers", 8): 0.01,
}
MEM = {
    ("zero_stage", 1): 7.0, ("zero_stage", 3): -9.0,
    ("reduce_bucket_size", 200_000_000): 1.5, ("reduce_bucket_size", 500_000_000): 4.0,
    ("activation_checkpointing", "selective"): 7.0, ("activation_checkpointing", "off"): 16.0,
    ("micro_batch", 4): 9.0, ("micro_batch", 8): 27.0,
    ("attention", "flash2"): -3.0,
    ("liger_kernels", True): -6.0,
    ("fp8", True): -1.0,
}
PATCH_SPEED = {"bf16_grad_allreduce": 0.07, "fused_rope": 0.01}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["liger_kernels"] and config["torch_compile"]:
        return {"status": "crash", "reason": "torch._dynamo hit config.recompile_limit (8) in liger_rms_norm"}
    if config["fp8"] and int(config["zero_stage"]) == 3:
        return {"status": "crash", "reason": "ZeRO-3 cannot partition Float8Tensor parameters"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items()) + sum(PATCH_SPEED[p] for p in patches)
    loss = 2.64 * (1.004 if "bf16_grad_allreduce" in patches else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.008, step_sd=0.012)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
