"""Transfer source/target: a Phi-style 14B dense model at sequence length 4096 on two 8x A100 40 GB nodes
(InfiniBand; 312 TFLOP/s dense BF16, 1.6 TB/s, 40 GiB), launched by a Megatron-style trainer with its flag names.
Its twin ``transfer_h100_phi14b.py`` is the same model and layout on two 8x H100 80 GB nodes under an
accelerate-style launcher with other flag names and the same ``mechanism`` fields.

Held out for issue 13 (session 16): written after the experience start learned to carry its bundle's measured
memory (``controller/experience/start.py``), and committed before either direction was measured; the constants
are not to be tuned on the outcome.

Layout (fixed): FSDP-style sharding over the 16 GPUs, full activation checkpointing and micro-batch 1 at the
reference, BF16 mixed precision.

What the hardware does:

* The A100 has no FP8 tensor cores: FP8 GEMMs crash there (the H100 gains +0.06 from them).
* The A100 is compute-bound: TP2 helps (+0.04; the all-reduces hide behind slow GEMMs), TP4 a little (+0.02);
  on the H100 both cost (-0.03, -0.08).  The 400 MB bucket costs on the A100 (-0.02: it delays the first
  all-reduce behind a slow backward) and helps on the H100 (+0.03).  Sign flips, all three.
* Same sign on both: comm overlap (+0.03 / +0.04), the 100 MB bucket (+0.01 / +0.02), flash attention
  (+0.08 / +0.10), torch.compile (+0.05 / +0.04), the fused optimizer (+0.02 / +0.02), no activation
  checkpointing instead of full (+0.14 / +0.12), micro-batch 2 (+0.03 / +0.04) and 4 (+0.04 / +0.06), bounded
  by memory.

Memory per GPU (GiB, the same model on both SKUs): sharded weights, gradients and optimizer state 14 / TP,
activations per micro-batch 3 / TP under full checkpointing, 22 / TP without (x0.8 with flash attention), FP8
weight copies 1.5 / TP, compile saves 1, runtime and NCCL 5.  The reference needs 22 GiB.  The A100 (40 GiB)
takes no checkpointing at micro-batch 1 with flash attention at TP1 (36.6), micro-batch 2 only from TP2; the H100
(80 GiB) takes micro-batch 2 without checkpointing at TP1 (54), micro-batch 4 only from TP2.

Failures (the software's, both SKUs): torch.compile with comm overlap crashes (the overlap's backward hooks
break the compiled graph).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 40.0
GPUS = 16
REF_STEP_S = 4.2
ENVIRONMENT = {"gpu_sku": "A100-40GB", "gpu_mem_gib": 40.0, "peak_tflops": 312.0, "bandwidth_gbs": 1555.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "phi", "params": 14e9, "seq_len": 4096, "parallel": "fsdp16"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -8.0, 4: -12.0}},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "ddp_bucket_size", "values": [25000000, 100000000, 400000000], "reference": 25000000, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25000000": "25mb", "100000000": "100mb", "400000000": "400mb"}},
    {"name": "recompute_granularity", "values": ["full", "none"], "reference": "full",
     "mechanism": "activation_checkpointing", "prior_mean": {"none": 0.10}, "mem_prior_gib": {"none": 16.0}},
    {"name": "use_flash_attn", "values": [False, True], "reference": False, "mechanism": "attention_kernel",
     "canonical": {"False": "sdpa", "True": "flash"}, "prior_mean": {True: 0.06}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.05}},
    {"name": "use_fused_optimizer", "values": [False, True], "reference": False, "mechanism": "optimizer_fusion",
     "canonical": {"False": "foreach", "True": "fused"}, "prior_mean": {True: 0.01}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 4.0, 4: 12.0}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("tensor_model_parallel_size", 2): 0.04, ("tensor_model_parallel_size", 4): 0.02,
    ("overlap_grad_reduce", True): 0.03,
    ("ddp_bucket_size", 100000000): 0.01, ("ddp_bucket_size", 400000000): -0.02,
    ("recompute_granularity", "none"): 0.14,
    ("use_flash_attn", True): 0.08,
    ("torch_compile", True): 0.05,
    ("use_fused_optimizer", True): 0.02,
    ("micro_batch_size", 2): 0.03, ("micro_batch_size", 4): 0.04,
    ("num_workers", 8): 0.005,
}

ACT = {"full": 3.0, "none": 22.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H100 twin (see the module docstring)."""
    tp, mbs = int(c["tensor_model_parallel_size"]), int(c["micro_batch_size"])
    act = ACT[c["recompute_granularity"]] / tp * (0.8 if c["use_flash_attn"] else 1.0)
    return 14.0 / tp + mbs * act + (1.5 / tp if c["fp8"] else 0.0) - (1.0 if c["torch_compile"] else 0.0) + 5.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["fp8"]:
        return {"status": "crash", "reason": "FP8 GEMMs need FP8 tensor cores (sm_89+); this is an A100"}
    if config["torch_compile"] and config["overlap_grad_reduce"]:
        return {"status": "crash", "reason": "the overlap's backward hooks break the compiled graph"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 2.05}
