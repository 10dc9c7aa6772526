"""Transfer source/target: a GPT 7B (seq 4096) on one 8x H20 node (compute-bound: 148 TFLOP/s, 4 TB/s), flags in
Megatron style.  Its twin ``transfer_h200_gpt7b.py`` is the same model on one 8x H200 node with renamed flags.

Sign flips between the two (the paper's section 5): FP8 GEMMs and tensor parallelism help on the compute-bound
H20 (FP8 +0.16, TP4 +0.12 log-speedup) and hurt on the H200 (-0.06, -0.15).  The kernel levers (graph compile,
flash attention, fused AdamW, larger micro-batches) help on both, by similar amounts; the balance levers (gradient
bucket, comm overlap) differ a little.  Memory: 96 GiB per GPU, so micro-batch 8 fits only with TP >= 4 or
activation recompute; torch.compile of recomputed blocks crashes (a conflict that transfers).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 96.0
GPUS = 8
REF_STEP_S = 2.0
REF_MEM_GIB = 60.0
ENVIRONMENT = {"gpu_sku": "H20", "gpu_mem_gib": 96.0, "peak_tflops": 148.0, "bandwidth_gbs": 4000.0,
               "gpus_per_node": 8, "nodes": 1, "interconnect": "nvlink", "framework": "torch",
               "model_family": "gpt", "params": 7e9, "seq_len": 4096, "parallel": "tp1-pp1-dp8"}

#: priors as a generic catalog states them (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -25.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "attention_backend", "values": ["sdpa", "flash2"], "reference": "sdpa", "mechanism": "attention_kernel",
     "canonical": {"flash2": "flash"}, "prior_mean": {"flash2": 0.03}},
    {"name": "fused_adam", "values": [False, True], "reference": False, "mechanism": "optimizer_fusion",
     "canonical": {"False": "loop", "True": "fused"}, "prior_mean": {True: 0.01}},
    {"name": "micro_batch_size", "values": [1, 2, 4, 8], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "mem_prior_gib": {2: 6.0, 4: 18.0, 8: 40.0}},
    {"name": "recompute_activations", "values": [False, True], "reference": False,
     "mechanism": "activation_checkpointing", "canonical": {"False": "off", "True": "on"},
     "prior_mean": {True: -0.08}, "mem_prior_gib": {True: -20.0}},
    {"name": "ddp_bucket_size_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket"},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "num_workers", "values": [2, 8], "reference": 2},
]

SPEED = {
    ("fp8", True): 0.16,
    ("tensor_model_parallel_size", 2): 0.08, ("tensor_model_parallel_size", 4): 0.12,
    ("torch_compile", True): 0.07,
    ("attention_backend", "flash2"): 0.09,
    ("fused_adam", True): 0.03,
    ("micro_batch_size", 2): 0.04, ("micro_batch_size", 4): 0.06, ("micro_batch_size", 8): 0.07,
    ("recompute_activations", True): -0.12,
    ("ddp_bucket_size_mb", 100): 0.01, ("ddp_bucket_size_mb", 400): 0.005,
    ("overlap_grad_reduce", True): 0.02,
    ("num_workers", 8): 0.005,
}
MEM = {
    ("tensor_model_parallel_size", 2): -20.0, ("tensor_model_parallel_size", 4): -30.0,
    ("torch_compile", True): -2.0, ("attention_backend", "flash2"): -4.0,
    ("micro_batch_size", 2): 8.0, ("micro_batch_size", 4): 24.0, ("micro_batch_size", 8): 56.0,
    ("recompute_activations", True): -25.0,
}


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["torch_compile"] and config["recompute_activations"]:
        return {"status": "crash", "reason": "torch.compile fails to trace recomputed blocks"}
    mem = REF_MEM_GIB + sum(MEM.get((k, v), 0.0) for k, v in config.items())
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.31 * (1.004 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
