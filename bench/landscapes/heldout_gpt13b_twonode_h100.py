"""Held-out landscape (written 2026-12-02 after the gain-weighted acquisition of issue 15, session 11; not tuned on).

A GPT 13B (seq 4096) trained with Megatron-style parallelism on two nodes of 8x H100 80 GiB (InfiniBand between
them).  Tensor parallelism within a node pays up to TP 4 and costs at TP 8 (the all-reduces grow while the GEMMs
shrink); pipeline parallelism only adds a bubble at this size.  FP8 GEMMs pay on the H100 at 13B, a little less
than the priors say.  Overlapping the parameter all-gather needs the distributed optimizer (a crash without it),
and the distributed optimizer alone saves memory and gains a little.  The tree algorithm for the inter-node
all-reduce has no stated prior and a real gain.  Recompute off and micro-batch 2 need the memory TP and the
distributed optimizer free.  Moderate noise.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 16
REF_STEP_S = 3.2
REF_MEM_GIB = 58.0

KNOBS = [
    {"name": "tensor_parallel", "values": [1, 2, 4, 8], "reference": 1, "ordered": True,
     "prior_mean": {2: 0.04, 4: 0.06, 8: 0.07}, "mem_prior_gib": {2: -14.0, 4: -22.0, 8: -26.0}},
    {"name": "pipeline_parallel", "values": [1, 2], "reference": 1, "prior_mean": {2: 0.02},
     "mem_prior_gib": {2: -12.0}},
    {"name": "sequence_parallel", "values": [False, True], "reference": False, "prior_mean": {True: 0.02},
     "mem_prior_gib": {True: -3.0}},
    {"name": "fp8", "values": [False, True], "reference": False, "prior_mean": {True: 0.15},
     "mem_prior_gib": {True: -2.0}},
    {"name": "use_distributed_optimizer", "values": [False, True], "reference": False,
     "prior_mean": {True: 0.0}, "mem_prior_gib": {True: -10.0}},
    {"name": "overlap_param_gather", "values": [False, True], "reference": False, "prior_mean": {True: 0.04}},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "prior_mean": {True: 0.03}},
    {"name": "nccl_algo", "values": ["ring", "tree"], "reference": "ring"},
    {"name": "micro_batch", "values": [1, 2], "reference": 1, "prior_mean": {2: 0.04}, "mem_prior_gib": {2: 14.0}},
    {"name": "recompute", "values": ["full", "selective", "none"], "reference": "full", "ordered": True,
     "prior_mean": {"selective": 0.06, "none": 0.11}, "mem_prior_gib": {"selective": 6.0, "none": 16.0}},
]

SPEED = {
    ("tensor_parallel", 2): 0.05, ("tensor_parallel", 4): 0.08, ("tensor_parallel", 8): -0.02,
    ("pipeline_parallel", 2): -0.04,
    ("sequence_parallel", True): 0.02,
    ("fp8", True): 0.11,
    ("use_distributed_optimizer", True): 0.01,
    ("overlap_param_gather", True): 0.04,
    ("overlap_grad_reduce", True): 0.03,
    ("nccl_algo", "tree"): 0.04,
    ("micro_batch", 2): 0.05,
    ("recompute", "selective"): 0.07, ("recompute", "none"): 0.13,
}
MEM = {
    ("tensor_parallel", 2): -15.0, ("tensor_parallel", 4): -23.0, ("tensor_parallel", 8): -27.0,
    ("pipeline_parallel", 2): -12.0, ("sequence_parallel", True): -4.0, ("fp8", True): -2.0,
    ("use_distributed_optimizer", True): -11.0,
    ("micro_batch", 2): 16.0, ("recompute", "selective"): 7.0, ("recompute", "none"): 19.0,
}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["overlap_param_gather"] and not config["use_distributed_optimizer"]:
        return {"status": "crash", "reason": "overlap_param_gather requires the distributed optimizer"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.007, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 2.21}
