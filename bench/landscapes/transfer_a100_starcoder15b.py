"""Transfer source/target: a StarCoder2-style 15B code model at sequence length 16384 on two 8x A100 80 GB nodes
(InfiniBand; 312 TFLOP/s dense BF16, 2.0 TB/s, 80 GiB), launched by a Megatron-style trainer with its flag names.
Its twin ``transfer_h100_starcoder15b.py`` is the same model and layout on two 8x H100 80 GB nodes under a
NeMo-style launcher with other flag names (``model.*``) and the same ``mechanism`` fields.

Held out for issues 13 and 15 (session 21): written after the change that carries an FP8 crash from a SKU where
FP8 never ran as a suspect only (``retrieval._never_ran``), and committed before either direction or any slot
count was measured; the constants are not to be tuned on the outcome.

Layout (fixed): data parallel over the 16 GPUs with the distributed optimizer, full activation recompute and
micro-batch 1 at the reference, BF16.

What the hardware does:

* The A100 has no FP8 tensor cores: FP8 GEMMs crash there (the H100 gains +0.05).
* The A100 is compute-bound at this width: TP2 helps (+0.03, its all-reduces hide behind slow GEMMs) and TP4
  costs (-0.02); on the H100 both cost (-0.04, -0.10).  Context parallelism over 2 GPUs costs on the A100 (-0.02)
  and helps on the H100 (+0.02: the ring exchange hides behind attention at 16k tokens).  The 200 MB bucket costs
  on the A100 (-0.01) and helps on the H100 (+0.02).  Sign flips, all four.
* Same sign, other size: comm overlap (+0.02 / +0.05), sequence parallelism beside TP (+0.02 / +0.03), CUDA
  graphs (+0.005 / +0.03: the faster GPU is more launch-bound).
* Kernel levers on both: flash attention (+0.12 / +0.14), selective recompute instead of full (+0.08 / +0.10)
  and none (+0.12 / +0.15), the fused cross entropy (+0.02 / +0.02), micro-batch 2 (+0.02 / +0.03) and 4
  (+0.03 / +0.05), bounded by memory.

Memory per GPU (GiB, the same model on both SKUs): weights, gradients and the sharded optimizer 30 / TP,
activations per micro-batch at 16k tokens 4 (full recompute), 14 (selective) or 40 (none), divided by TP x CP
and x0.6 with flash attention, FP8 weight copies 1.5 / TP, runtime and NCCL 6.  The reference needs 40 GiB; no
recompute fits at micro-batch 1 (76), micro-batch 2 without recompute needs flash attention and TP2 or CP2.

Failures (the software's, both SKUs): sequence parallelism without tensor parallelism crashes (Megatron asserts
it), and CUDA graphs crash beside context parallelism (the ring's dynamic sends cannot be captured).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 16
REF_STEP_S = 9.5
ENVIRONMENT = {"gpu_sku": "A100", "gpu_mem_gib": 80.0, "peak_tflops": 312.0, "bandwidth_gbs": 2039.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "starcoder", "params": 15e9, "seq_len": 16384, "parallel": "dp16-distopt"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -22.0}},
    {"name": "sequence_parallel", "values": [False, True], "reference": False, "mechanism": "sequence_parallel",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "context_parallel_size", "values": [1, 2], "reference": 1, "mechanism": "context_parallel"},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "ddp_bucket_size", "values": [40000000, 200000000], "reference": 40000000, "mechanism": "grad_bucket",
     "canonical": {"40000000": "40mb", "200000000": "200mb"}},
    {"name": "recompute_granularity", "values": ["full", "selective", "none"], "reference": "full",
     "mechanism": "activation_checkpointing", "canonical": {"full": "full", "selective": "selective", "none": "off"},
     "prior_mean": {"selective": 0.06, "none": 0.10}, "mem_prior_gib": {"selective": 10.0, "none": 36.0}},
    {"name": "use_flash_attn", "values": [False, True], "reference": False, "mechanism": "attention_kernel",
     "canonical": {"False": "sdpa", "True": "flash"}, "prior_mean": {True: 0.08}},
    {"name": "cross_entropy_loss_fusion", "values": [False, True], "reference": False,
     "mechanism": "fused_cross_entropy", "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.01}},
    {"name": "enable_cuda_graph", "values": [False, True], "reference": False, "mechanism": "cuda_graphs",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 8.0, 4: 24.0}},
]

SPEED = {
    ("tensor_model_parallel_size", 2): 0.03, ("tensor_model_parallel_size", 4): -0.02,
    ("context_parallel_size", 2): -0.02,
    ("overlap_grad_reduce", True): 0.02,
    ("ddp_bucket_size", 200000000): -0.01,
    ("recompute_granularity", "selective"): 0.08, ("recompute_granularity", "none"): 0.12,
    ("use_flash_attn", True): 0.12,
    ("cross_entropy_loss_fusion", True): 0.02,
    ("enable_cuda_graph", True): 0.005,
    ("micro_batch_size", 2): 0.02, ("micro_batch_size", 4): 0.03,
}
#: sequence parallelism's gain, beside TP only
SP_GAIN = 0.02

ACT = {"full": 4.0, "selective": 14.0, "none": 40.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H100 twin (see the module docstring)."""
    tp, cp, mbs = int(c["tensor_model_parallel_size"]), int(c["context_parallel_size"]), int(c["micro_batch_size"])
    act = ACT[c["recompute_granularity"]] / (tp * cp) * (0.6 if c["use_flash_attn"] else 1.0)
    return 30.0 / tp + mbs * act + (1.5 / tp if c["fp8"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["fp8"]:
        return {"status": "crash", "reason": "FP8 GEMMs need FP8 tensor cores (sm_89+); this is an A100"}
    if config["sequence_parallel"] and int(config["tensor_model_parallel_size"]) == 1:
        return {"status": "crash", "reason": "sequence parallelism requires tensor model parallelism"}
    if config["enable_cuda_graph"] and int(config["context_parallel_size"]) > 1:
        return {"status": "crash", "reason": "CUDA graph capture failed: context-parallel ring sends are dynamic"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["sequence_parallel"]:
        logsp += SP_GAIN
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 1.42}
