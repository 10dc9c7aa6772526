"""Held-out landscape (written 2026-11-30, before any batch/async tuning; not tuned on).

Pipeline-parallel job on 16 GPUs with many small levers (0.5-3% each), two of
which the priors rate positive but truly slow the job down, one pair conflict
(interleaved schedule with the overlapped p2p crashes), and three source
patches, one of which changes the loss beyond tolerance.  Moderate noise: the
levers sit near the noise floor, so the search must stack them.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 16
REF_STEP_S = 3.10
REF_MEM_GIB = 61.0
TRIAL_UPDATES = 30

_LEVERS = [  # name, prior mean, true log-speedup, mem GiB
    ("interleaved_schedule", 0.03, 0.030, 3.0), ("overlap_p2p", 0.02, 0.022, 0.5),
    ("fused_rmsnorm", 0.015, 0.012, 0.0), ("fused_rope", 0.01, 0.010, 0.0),
    ("bucket_cap_large", 0.01, -0.012, 2.0), ("nccl_ll128", 0.01, 0.014, 0.0),
    ("async_checkpoint", 0.008, 0.009, 1.0), ("pinned_dataloader", 0.005, 0.006, 0.0),
    ("cuda_graphs", 0.02, -0.015, 4.0), ("grad_reduce_bf16", 0.015, 0.018, -1.0),
    ("deferred_embedding_grad", 0.008, 0.011, 0.5), ("expandable_segments", 0.004, 0.005, -0.5),
]
KNOBS = [{"name": n, "values": [False, True], "reference": False, "prior_mean": {True: pm},
          "mem_prior_gib": {True: mg}} for n, pm, _, mg in _LEVERS]
PATCHES = ["fuse_swiglu", "fast_softmax_approx", "pack_microbatches"]
PATCH_PRIORS = {"fuse_swiglu": 0.02, "fast_softmax_approx": 0.03, "pack_microbatches": 0.01}
_PATCH_GAIN = {"fuse_swiglu": 0.025, "fast_softmax_approx": 0.04, "pack_microbatches": 0.012}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["interleaved_schedule"] and config["overlap_p2p"]:
        return {"status": "crash", "reason": "deadlock: interleaved 1F1B with overlapped p2p"}
    mem = REF_MEM_GIB + sum(mg for n, _, _, mg in _LEVERS if config[n])
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(g for n, _, g, _ in _LEVERS if config[n]) + sum(_PATCH_GAIN[p] for p in patches)
    loss = 2.62 * (1.05 if "fast_softmax_approx" in patches else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.008)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
