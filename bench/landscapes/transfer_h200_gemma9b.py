"""Transfer source/target: a Gemma-style 9B dense model at sequence length 8192 on one 8x H200 node (NVLink;
989 TFLOP/s dense BF16, 4.8 TB/s, 141 GiB), launched by a torchtitan-style trainer with its flag names.  Its twin
``transfer_l40s_gemma9b.py`` is the same model and layout on one 8x L40S node (PCIe, 48 GiB) under a
Hugging Face Trainer-style launcher with other flag names and the same ``mechanism`` fields.

Held out for issue 13 (session 16): written after the stated-prior evidence of the experience start
(``retrieval.search_experience``) and committed before either direction was measured; the constants are not to
be tuned on the outcome.

Layout (fixed): FSDP over the 8 GPUs, full activation checkpointing and micro-batch 1 at the reference, BF16.

What the hardware does:

* The H200's NVLink makes gradient traffic cheap: comm overlap helps (+0.05) and the 400 MB bucket costs a
  little (-0.01: it delays the first all-reduce); on the L40S's PCIe, overlap contends with the compute stream's
  copies (-0.02) and the 400 MB bucket saves launches (+0.04).  Sign flips, both.
* Tensor parallelism costs on both (H200 TP2 -0.04, TP4 -0.09; L40S over PCIe -0.07, -0.15).
* FP8 helps both, more on the L40S (+0.05 / +0.10); the 100 MB bucket +0.02 / +0.02.
* Kernel levers on both: flash attention (+0.10 / +0.08), torch.compile (+0.05 / +0.06), the fused optimizer
  (+0.02 / +0.02), no activation checkpointing instead of full (+0.12 / +0.10), micro-batch 2 (+0.04 / +0.03)
  and 4 (+0.05 / +0.04), bounded by memory.

Memory per GPU (GiB, the same model on both SKUs): sharded weights, gradients and optimizer state 18 / TP,
activations per micro-batch 4 / TP under full checkpointing, 32 / TP without (x0.8 with flash attention), FP8
weight copies 1.2 / TP, compile saves 1, runtime and NCCL 5.  The reference needs 27 GiB.  The H200 (141 GiB)
takes micro-batch 4 without checkpointing at TP1 (125.4 with flash attention); the L40S (48 GiB) takes no
checkpointing only from TP2 (micro-batch 2 there: 39.6).

Failures (the software's, both SKUs): FP8 without torch.compile crashes (the float8 training path is compiled).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 141.0
GPUS = 8
REF_STEP_S = 2.3
ENVIRONMENT = {"gpu_sku": "H200", "gpu_mem_gib": 141.0, "peak_tflops": 989.0, "bandwidth_gbs": 4800.0,
               "gpus_per_node": 8, "nodes": 1, "interconnect": "nvlink", "framework": "torch",
               "model_family": "gemma", "params": 9e9, "seq_len": 8192, "parallel": "fsdp8"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "float8", "values": [0, 1], "reference": 0, "mechanism": "low_precision_gemm",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "tensor_parallel_degree", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -10.0, 4: -15.0}},
    {"name": "fsdp_overlap", "values": ["off", "on"], "reference": "off", "mechanism": "comm_overlap"},
    {"name": "bucket_cap_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "ac_mode", "values": ["full", "none"], "reference": "full",
     "mechanism": "activation_checkpointing", "prior_mean": {"none": 0.10}, "mem_prior_gib": {"none": 24.0}},
    {"name": "sdpa_backend", "values": ["math", "flash"], "reference": "math", "mechanism": "attention_kernel",
     "canonical": {"math": "sdpa"}, "prior_mean": {"flash": 0.06}},
    {"name": "compile", "values": [0, 1], "reference": 0, "mechanism": "graph_compile",
     "canonical": {"0": "off", "1": "on"}, "prior_mean": {1: 0.05}},
    {"name": "fused_optimizer", "values": [0, 1], "reference": 0, "mechanism": "optimizer_fusion",
     "canonical": {"0": "foreach", "1": "fused"}, "prior_mean": {1: 0.01}},
    {"name": "local_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 6.0, 4: 18.0}},
    {"name": "data_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("float8", 1): 0.05,
    ("tensor_parallel_degree", 2): -0.04, ("tensor_parallel_degree", 4): -0.09,
    ("fsdp_overlap", "on"): 0.05,
    ("bucket_cap_mb", 100): 0.02, ("bucket_cap_mb", 400): -0.01,
    ("ac_mode", "none"): 0.12,
    ("sdpa_backend", "flash"): 0.10,
    ("compile", 1): 0.05,
    ("fused_optimizer", 1): 0.02,
    ("local_batch_size", 2): 0.04, ("local_batch_size", 4): 0.05,
    ("data_workers", 8): 0.005,
}

ACT = {"full": 4.0, "none": 32.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the L40S twin (see the module docstring)."""
    tp, mbs = int(c["tensor_parallel_degree"]), int(c["local_batch_size"])
    act = ACT[c["ac_mode"]] / tp * (0.8 if c["sdpa_backend"] == "flash" else 1.0)
    return 18.0 / tp + mbs * act + (1.2 / tp if c["float8"] else 0.0) - (1.0 if c["compile"] else 0.0) + 5.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["float8"] and not config["compile"]:
        return {"status": "crash", "reason": "the float8 training path requires torch.compile"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.31 * (1.002 if config["float8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
