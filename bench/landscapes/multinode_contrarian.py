"""Multi-node data-parallel job, 4 nodes x 8 H100 over InfiniBand.

The single best lever is the NCCL tree algorithm for the inter-node gradient
all-reduce (+10% here, like the paper's +10.2% communication setting) but the
prior rates it harmful (-4%, unsure).  Compile helps and is rated about
right; ZeRO-2 is rated positive but costs time (it only saves memory);
turning recomputation off needs ZeRO-2's memory.  Small bucket/graph knobs
are sub-gate.  Cross-node noise is moderate.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 32
REF_STEP_S = 2.40
REF_MEM_GIB = 58.0

KNOBS = [
    {"name": "nccl_algo", "values": ["auto", "ring", "tree"], "reference": "auto", "mechanism": "collectives",
     "prior_mean": {"ring": 0.0, "tree": -0.04}, "prior_sd": 0.08},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "collectives",
     "prior_mean": {True: 0.04}},
    {"name": "bucket_mb", "values": [25, 50, 100, 200], "reference": 25, "ordered": True,
     "prior_mean": {50: 0.01, 100: 0.015, 200: 0.015}},
    {"name": "zero_stage", "values": [1, 2, 3], "reference": 1, "ordered": True,
     "prior_mean": {2: 0.03, 3: -0.05}, "mem_prior_gib": {2: -6.0, 3: -15.0}},
    {"name": "recompute", "values": [True, False], "reference": True,
     "prior_mean": {False: 0.10}, "mem_prior_gib": {False: 20.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "prior_mean": {True: 0.06}},
    {"name": "static_graph", "values": [False, True], "reference": False, "prior_mean": {True: 0.01}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "prior_mean": {8: 0.005}},
]

SPEED = {
    ("nccl_algo", "ring"): -0.01, ("nccl_algo", "tree"): 0.10,
    ("overlap_grad_reduce", True): 0.035,
    ("bucket_mb", 50): 0.008, ("bucket_mb", 100): 0.012, ("bucket_mb", 200): 0.006,
    ("zero_stage", 2): -0.015, ("zero_stage", 3): -0.11,
    ("recompute", False): 0.13,
    ("torch_compile", True): 0.07,
    ("static_graph", True): 0.006,
    ("num_workers", 8): 0.002,
}
MEM = {("zero_stage", 2): -9.0, ("zero_stage", 3): -22.0, ("recompute", False): 26.0,
       ("bucket_mb", 200): 1.5, ("torch_compile", True): -2.0}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["static_graph"] and config["zero_stage"] == 3:
        return {"status": "crash", "reason": "static_graph is incompatible with ZeRO-3 parameter partitioning"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["nccl_algo"] == "tree" and config["overlap_grad_reduce"]:
        logsp += 0.02  # tree's lower latency hides better under overlapped reduction
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.008, step_sd=0.015)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 2.87}
