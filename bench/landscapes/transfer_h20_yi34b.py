"""Transfer source/target: a Yi-style 34B dense model at sequence length 8192 on two 8x H20 nodes (InfiniBand;
148 TFLOP/s dense BF16, 4 TB/s, 96 GiB), launched by Megatron-LM with its flag names.  Its twin
``transfer_h200_yi34b.py`` is the same model and layout on two 8x H200 nodes (141 GiB) under a torchtitan-style
launcher with other flag names and the same ``mechanism`` fields.

Held out for issue 13 (session 15): written after the revision fix for sign-unknown levers
(``TimeModel._keep_unsigned``) and the removal of the transfer check, and committed before it was ever measured;
the constants are not to be tuned on the outcome.

Layout (fixed): FSDP-style sharding over the 16 GPUs (ZeRO-3 semantics), the reference with full activation
checkpointing (the only setting that fits 8k tokens at micro-batch 1 on every SKU), BF16 mixed precision.

What the hardware does:

* H20 is compute-bound: FP8 GEMMs help a lot (+0.11); TP2 over NVLink helps (+0.05: the all-reduces hide behind
  slow GEMMs), TP4 a little (+0.01); comm overlap +0.02; a 100 MB bucket +0.01, 400 MB -0.01.
* H200 (the twin): seven times the GEMM throughput, the same network: FP8 helps less (+0.04), TP2 and TP4 cost
  (-0.05, -0.11: sign flips), comm overlap and larger buckets are worth more (+0.06; +0.02 and +0.04).
* Kernel levers on both, by similar amounts: flash attention (+0.09 / +0.11), torch.compile (+0.04 / +0.05), the
  fused optimizer (+0.02 / +0.02), micro-batch 2 (+0.03 / +0.04, bounded by memory); no activation
  checkpointing instead of full (+0.14 / +0.13, bounded by memory).  (Checkpointing is on/off: the mechanism
  catalog files full and selective both as ``on``.)

Memory per GPU (GiB, the same model on both SKUs): sharded weights, gradients and optimizer state 30 / TP,
activations per micro-batch 6 / TP under full checkpointing, 44 / TP without (x0.8 with flash
attention), FP8 weight copies 3 / TP, compile saves 2, runtime and NCCL 6.  The reference needs 42 GiB.  On the
H20 (96 GiB) no checkpointing fits at micro-batch 1 (with flash attention) and micro-batch 2 only at TP2; the H200
(141 GiB) takes micro-batch 2 without checkpointing at TP1.

Failures (the software's, both SKUs): torch.compile at TP4 crashes (a DTensor sharding the compiler cannot
trace); FP8 without flash attention crashes (the FP8 attention path is flash-only).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 96.0
GPUS = 16
REF_STEP_S = 9.0
ENVIRONMENT = {"gpu_sku": "H20", "gpu_mem_gib": 96.0, "peak_tflops": 148.0, "bandwidth_gbs": 4000.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "llama", "params": 34e9, "seq_len": 8192, "parallel": "fsdp16"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -20.0, 4: -30.0}},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "ddp_bucket_size", "values": [25000000, 100000000, 400000000], "reference": 25000000, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25000000": "25mb", "100000000": "100mb", "400000000": "400mb"}},
    {"name": "recompute_granularity", "values": ["full", "none"], "reference": "full",
     "mechanism": "activation_checkpointing", "prior_mean": {"none": 0.10}, "mem_prior_gib": {"none": 38.0}},
    {"name": "use_flash_attn", "values": [False, True], "reference": False, "mechanism": "attention_kernel",
     "canonical": {"False": "sdpa", "True": "flash"}, "prior_mean": {True: 0.06}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.05}},
    {"name": "use_fused_optimizer", "values": [False, True], "reference": False, "mechanism": "optimizer_fusion",
     "canonical": {"False": "foreach", "True": "fused"}, "prior_mean": {True: 0.01}},
    {"name": "micro_batch_size", "values": [1, 2], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 10.0}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("fp8", True): 0.11,
    ("tensor_model_parallel_size", 2): 0.05, ("tensor_model_parallel_size", 4): 0.01,
    ("overlap_grad_reduce", True): 0.02,
    ("ddp_bucket_size", 100000000): 0.01, ("ddp_bucket_size", 400000000): -0.01,
    ("recompute_granularity", "none"): 0.14,
    ("use_flash_attn", True): 0.09,
    ("torch_compile", True): 0.04,
    ("use_fused_optimizer", True): 0.02,
    ("micro_batch_size", 2): 0.03,
    ("num_workers", 8): 0.005,
}

ACT = {"full": 6.0, "none": 44.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H200 twin (see the module docstring)."""
    tp, mbs = int(c["tensor_model_parallel_size"]), int(c["micro_batch_size"])
    act = ACT[c["recompute_granularity"]] / tp * (0.8 if c["use_flash_attn"] else 1.0)
    return 30.0 / tp + mbs * act + (3.0 / tp if c["fp8"] else 0.0) - (2.0 if c["torch_compile"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["torch_compile"] and int(config["tensor_model_parallel_size"]) == 4:
        return {"status": "crash", "reason": "torch.compile cannot trace the TP4 DTensor sharding"}
    if config["fp8"] and not config["use_flash_attn"]:
        return {"status": "crash", "reason": "FP8 attention path requires flash attention"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 1.92 * (1.003 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
