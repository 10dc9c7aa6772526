"""Transfer source/target: a Llama 8B (seq 8192) data-parallel over two 8x H20 nodes (InfiniBand), flags in
Megatron style.  Its twin ``transfer_h100_llama8b.py`` is the same model on two 8x H100 nodes with another
launcher's flag names (torchtitan / HF style) and the same ``mechanism`` fields.

Written before any tuning of the experience code against it (issue 13, second pair); the constants are not to be
tuned on the benchmark's outcome.

What differs between the two SKUs (the paper's section 5, H20 vs H100/H200):

* H20 is compute-bound (148 TFLOP/s dense BF16, 4 TB/s, 96 GiB): FP8 GEMMs help (+0.14 log-speedup) and tensor
  parallelism over NVLink helps a little (TP2 +0.06, TP4 +0.03, sequence parallelism +0.02 with TP); larger
  gradient buckets hurt (400 MB -0.02: fewer buckets, less overlap with the slow backward), and comm overlap is
  worth little (+0.02).
* H100 (989 TFLOP/s, 3.35 TB/s, 80 GiB) is not compute-bound at this size: FP8 costs more in casts and scaling than
  it saves (-0.05), TP costs (TP2 -0.06, TP4 -0.14), the 400 MB bucket and comm overlap help (+0.04, +0.06), since
  the inter-node all-reduce is now a large share of the step.
* The kernel levers help on both by similar amounts, somewhat more on the faster H100 where overheads weigh more:
  graph compile, flash attention, fused AdamW, fused cross-entropy, fused RMSNorm, fused RoPE, micro-batch.
  Activation recompute costs about 15% on both.

Memory (per GPU): weights + gradients 32 GiB / TP, optimizer state 20 GiB (the distributed optimizer shards it over
the 16 ranks), activations 18 GiB per sequence / TP (x0.8 with sequence parallelism, x0.3 with recompute), less
3 GiB per sequence with flash attention and 4 GiB with the fused cross-entropy (no full logits).  The reference
(TP1, micro-batch 1) needs 70 GiB.  So micro-batch 2 fits on the H100 only with the memory savers, micro-batch 4
needs the distributed optimizer or TP there; the H20's 96 GiB takes micro-batch 4 with the savers and TP2.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 96.0
GPUS = 16
REF_STEP_S = 6.0
ENVIRONMENT = {"gpu_sku": "H20", "gpu_mem_gib": 96.0, "peak_tflops": 148.0, "bandwidth_gbs": 4000.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "llama", "params": 8e9, "seq_len": 8192, "parallel": "tp1-pp1-dp16"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -25.0, 4: -38.0}},
    {"name": "sequence_parallel", "values": [False, True], "reference": False, "mechanism": "sequence_parallel",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "attention_backend", "values": ["sdpa", "flash"], "reference": "sdpa",
     "mechanism": "attention_kernel", "prior_mean": {"flash": 0.03}},
    {"name": "fused_adam", "values": [False, True], "reference": False, "mechanism": "optimizer_fusion",
     "canonical": {"False": "loop", "True": "fused"}, "prior_mean": {True: 0.01}},
    {"name": "cross_entropy_fusion", "values": [False, True], "reference": False,
     "mechanism": "fused_cross_entropy", "canonical": {"False": "off", "True": "on"}},
    {"name": "fused_rmsnorm", "values": [False, True], "reference": False, "mechanism": "fused_rmsnorm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "apply_rope_fusion", "values": [False, True], "reference": False, "mechanism": "rope_kernel",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 15.0, 4: 45.0}},
    {"name": "recompute_activations", "values": [False, True], "reference": False,
     "mechanism": "activation_checkpointing", "canonical": {"False": "off", "True": "on"},
     "prior_mean": {True: -0.08}, "mem_prior_gib": {True: -12.0}},
    {"name": "use_distributed_optimizer", "values": [False, True], "reference": False,
     "mechanism": "distributed_optimizer", "canonical": {"False": "off", "True": "on"},
     "mem_prior_gib": {True: -15.0}},
    {"name": "ddp_bucket_size_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket"},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

#: log-speedups of each setting on its own (TP-dependent terms in evaluate)
SPEED = {
    ("fp8", True): 0.14,
    ("tensor_model_parallel_size", 2): 0.06, ("tensor_model_parallel_size", 4): 0.03,
    ("torch_compile", True): 0.05,
    ("attention_backend", "flash"): 0.08,
    ("fused_adam", True): 0.02,
    ("cross_entropy_fusion", True): 0.03,
    ("fused_rmsnorm", True): 0.02,
    ("apply_rope_fusion", True): 0.015,
    ("micro_batch_size", 2): 0.04, ("micro_batch_size", 4): 0.06,
    ("recompute_activations", True): -0.15,
    ("use_distributed_optimizer", True): -0.01,
    ("ddp_bucket_size_mb", 100): 0.01, ("ddp_bucket_size_mb", 400): -0.02,
    ("overlap_grad_reduce", True): 0.02,
    ("num_workers", 8): 0.005,
}
SEQ_PARALLEL_GAIN = 0.02  # only with TP > 1


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB) of a configuration (see the module docstring)."""
    tp = int(c["tensor_model_parallel_size"])
    per_seq = 18.0 / tp
    if c["sequence_parallel"] and tp > 1:
        per_seq *= 0.8
    if c["recompute_activations"]:
        per_seq *= 0.3
    per_seq -= (3.0 if c["attention_backend"] == "flash" else 0.0) / tp
    per_seq -= (4.0 if c["cross_entropy_fusion"] else 0.0) / tp
    optim = 20.0 / 16 if c["use_distributed_optimizer"] else 20.0
    return 32.0 / tp + optim + int(c["micro_batch_size"]) * max(per_seq, 1.0) - (1.0 if c["torch_compile"] else 0.0)


def evaluate(config: dict, patches: list, rng) -> dict:
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["sequence_parallel"] and int(config["tensor_model_parallel_size"]) > 1:
        logsp += SEQ_PARALLEL_GAIN
    loss = 2.05 * (1.003 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
