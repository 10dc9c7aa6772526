"""Transfer source/target: an OLMo-style 13B dense model at sequence length 4096 on one 8x A100 80 GB node (NVLink 3;
312 TFLOP/s dense BF16, 2.0 TB/s), launched by a Megatron-LM-style trainer with its flag names.  Its twin
``transfer_h200_olmo13b.py`` is the same model and layout on one 8x H200 node under a Lightning-style launcher
with other flag names and the same ``mechanism`` fields.

Held out for issues 13 and 15 (session 33): written after every search and retrieval rule on ``main`` at the time
and committed before either landscape or direction was measured; the constants are not to be tuned on the
outcome.

Layout: data-parallel over the 8 GPUs with the optimizer, gradients and parameters sharded (ZeRO-3 / full shard),
full activation checkpointing, micro-batch 1, unfused attention at the reference, BF16 (no FP8 on the A100).

What the hardware does (A100 here, the H200 twin in brackets):

* Sharding: gradients-and-optimizer only (ZeRO-2) saves the parameter all-gathers, +0.03 (+0.06: on the H200 the
  compute is three times faster, so communication is a larger share of the step).
* Comm overlap +0.04 (+0.07); the 100 MB bucket +0.02 (+0.01); the 400 MB bucket -0.01 (+0.03): it delays the
  first all-reduce behind the A100's slower backward and saves launches on the H200.  **Sign flip.**
* Tensor parallelism 2: -0.05 (+0.02): on the H200 the per-GPU GEMMs of a 13B model at micro-batch 1 are too
  small to fill it, and TP's halved FSDP traffic pays.  **Sign flip** (a balance mechanism either way).
* Kernel levers on both: flash attention +0.09 (+0.11), torch.compile +0.07 (+0.04), the fused optimizer
  +0.03 (+0.02), selective checkpointing +0.06 (+0.04) and none +0.09 (+0.06), micro-batch 2 +0.04 (+0.06) and
  4 +0.05 (+0.09), more loader workers +0.01 (+0.01), bounded by memory.

Memory per GPU (GiB, the same model on both SKUs): sharded model state 26 (ZeRO-3) or 48.75 (ZeRO-2, bf16
parameters replicated), divided by the TP degree; activations per micro-batch 3 (full checkpointing), 9
(selective) or 24 (none), x0.8 with flash attention, divided by TP; compile saves 1; runtime and NCCL 6.  The
reference needs 35.  The A100 (80) takes no checkpointing at micro-batch 1 under ZeRO-2 (74.0 with flash) but
micro-batch 2 only under ZeRO-3 (70.4); the H200 (141) takes ZeRO-2 with no checkpointing at micro-batch 4 (131.6
with flash).

Failures (the software's, both SKUs): torch.compile with selective activation checkpointing crashes (the
checkpointed regions' saved-tensor hooks break the compiled graph).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 8
REF_STEP_S = 5.2
ENVIRONMENT = {"gpu_sku": "A100", "gpu_mem_gib": 80.0, "peak_tflops": 312.0, "bandwidth_gbs": 2039.0,
               "gpus_per_node": 8, "nodes": 1, "interconnect": "nvlink", "framework": "torch",
               "model_family": "olmo", "params": 13e9, "seq_len": 4096, "parallel": "fsdp8"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "data_parallel_sharding_strategy", "values": ["optim_grads_params", "optim_grads"],
     "reference": "optim_grads_params", "mechanism": "zero_stage",
     "canonical": {"optim_grads_params": "3", "optim_grads": "2"}, "mem_prior_gib": {"optim_grads": 20.0}},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "ddp_bucket_size_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0}},
    {"name": "recompute_granularity", "values": ["full", "selective", "none"], "reference": "full",
     "ordered": True, "mechanism": "activation_checkpointing",
     "canonical": {"full": "on", "selective": "selective", "none": "off"},
     "prior_mean": {"selective": 0.05, "none": 0.10}, "mem_prior_gib": {"selective": 6.0, "none": 20.0}},
    {"name": "attention_backend", "values": ["unfused", "flash"], "reference": "unfused",
     "mechanism": "attention_kernel", "canonical": {"unfused": "sdpa"}, "prior_mean": {"flash": 0.08},
     "mem_prior_gib": {"flash": -2.0}},
    {"name": "compile_model", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.06}},
    {"name": "optimizer_impl", "values": ["foreach", "fused"], "reference": "foreach",
     "mechanism": "optimizer_fusion", "prior_mean": {"fused": 0.02}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "prior_mean": {2: 0.03, 4: 0.04}, "mem_prior_gib": {2: 5.0, 4: 15.0}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("data_parallel_sharding_strategy", "optim_grads"): 0.03,
    ("overlap_grad_reduce", True): 0.04,
    ("ddp_bucket_size_mb", 100): 0.02, ("ddp_bucket_size_mb", 400): -0.01,
    ("tensor_model_parallel_size", 2): -0.05,
    ("recompute_granularity", "selective"): 0.06, ("recompute_granularity", "none"): 0.09,
    ("attention_backend", "flash"): 0.09,
    ("compile_model", True): 0.07,
    ("optimizer_impl", "fused"): 0.03,
    ("micro_batch_size", 2): 0.04, ("micro_batch_size", 4): 0.05,
    ("num_workers", 8): 0.01,
}

ACTIVATIONS = {"full": 3.0, "selective": 9.0, "none": 24.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H200 twin."""
    tp, mbs = int(c["tensor_model_parallel_size"]), int(c["micro_batch_size"])
    state = 48.75 if c["data_parallel_sharding_strategy"] == "optim_grads" else 26.0
    act = ACTIVATIONS[c["recompute_granularity"]] * (0.8 if c["attention_backend"] == "flash" else 1.0)
    return state / tp + mbs * act / tp - (1.0 if c["compile_model"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["compile_model"] and config["recompute_granularity"] == "selective":
        return {"status": "crash", "reason": "torch._dynamo: saved-tensor hooks of selective recompute are not traceable"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.005, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 2.58}
