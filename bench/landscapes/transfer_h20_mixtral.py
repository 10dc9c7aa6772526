"""Transfer source/target: a Mixtral-style 8x7B MoE (46.7B parameters, 12.9B active, top-2 of 8 experts, seq 4096)
on four 8x H20 nodes (InfiniBand; 148 TFLOP/s dense BF16, 4 TB/s, 96 GiB), flags in Megatron style.  Its twin
``transfer_h100_mixtral.py`` is the same model and layout on four 8x H100 nodes with another launcher's flag names
and the same ``mechanism`` fields.

Held out for issue 13: written after the experience code (refine before escape, commit ``82634ad``) and committed
before it was ever measured on it; the constants are not to be tuned on the benchmark's outcome.

Layout (fixed): pipeline parallel 4 (one stage per node, 8 layers each), data parallel 8 inside a node, the
distributed optimizer on (without it the expert optimizer state does not fit on either SKU), expert parallelism
carved out of the data-parallel group (EP <= 8 stays on NVLink), expert tensor parallelism 1.

What such hardware does (the paper's section 5, H20 vs H100):

* H20 is compute-bound: FP8 GEMMs help (+0.10 log-speedup); tensor parallelism over NVLink helps a little (TP2
  +0.05); more expert parallelism helps (EP4 +0.06, EP8 +0.09: fewer experts per GPU, bigger per-expert token
  batches, and the intra-node all-to-all is cheap next to the slow GEMMs); the interleaved pipeline (2 virtual
  stages) helps (+0.05: the bubble is a fixed share of a long step and the extra point-to-point sends hide behind
  it).  Comm overlap and the all-to-all dispatcher are worth about 1%.
* H100 (see the twin): these balance levers and FP8 flip or shrink, because the GEMMs are 6.7x faster and the
  communication is not.
* Kernel levers help on both by similar amounts: grouped GEMM for the experts (+0.05 with four experts per GPU at
  EP2, a third of that with two at EP4, nothing with one at EP8), compile, flash attention, the fused optimizer,
  micro-batch.  Activation recompute costs about 15% (a little more on the compute-bound H20).

Memory per GPU (GiB, the same model on both SKUs): expert weights + fp32 main grads 56 / EP, expert optimizer
shard 16 (the distributed optimizer over the expert data-parallel group: constant in EP), dense layers 4 / TP;
in-flight activations per micro-batch (1F1B on the first stage) 20 / TP, x0.3 with recompute, less 5 / TP with
flash attention, x1.1 with the interleaved schedule; dispatcher buffers per micro-batch 1.5 x EP / 2 for the
all-gather dispatcher (every rank gathers the group's tokens), 0.5 for all-to-all; FP8 weight copies +1.5; compile
-1.  The reference (EP2, TP1, micro-batch 1) needs 69.5 GiB.  Micro-batch 4 needs EP >= 4 with TP2 or recompute.

Failure: FP8 with the grouped GEMM crashes (Transformer Engine's FP8 grouped GEMM needs the tokens per expert
padded to a multiple of 16, which this launcher does not do): a conflict that transfers.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 96.0
GPUS = 32
REF_STEP_S = 9.0
ENVIRONMENT = {"gpu_sku": "H20", "gpu_mem_gib": 96.0, "peak_tflops": 148.0, "bandwidth_gbs": 4000.0,
               "gpus_per_node": 8, "nodes": 4, "interconnect": "infiniband", "framework": "torch",
               "model_family": "mixtral", "params": 46.7e9, "seq_len": 4096, "parallel": "tp1-pp4-dp8"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0}},
    {"name": "expert_model_parallel_size", "values": [2, 4, 8], "reference": 2, "ordered": True,
     "mechanism": "expert_parallel", "mem_prior_gib": {4: -12.0, 8: -18.0}},
    {"name": "moe_grouped_gemm", "values": [False, True], "reference": False, "mechanism": "grouped_gemm",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "moe_token_dispatcher_type", "values": ["allgather", "alltoall"], "reference": "allgather",
     "mechanism": "moe_dispatcher"},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "attention_backend", "values": ["unfused", "flash"], "reference": "unfused",
     "mechanism": "attention_kernel", "canonical": {"unfused": "naive"}, "prior_mean": {"flash": 0.03}},
    {"name": "optimizer_impl", "values": ["torch", "te_fused"], "reference": "torch",
     "mechanism": "optimizer_fusion", "canonical": {"torch": "loop", "te_fused": "fused"},
     "prior_mean": {"te_fused": 0.01}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 18.0, 4: 55.0}},
    {"name": "recompute_activations", "values": [False, True], "reference": False,
     "mechanism": "activation_checkpointing", "canonical": {"False": "off", "True": "on"},
     "prior_mean": {True: -0.08}, "mem_prior_gib": {True: -25.0}},
    {"name": "overlap_grad_reduce", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "virtual_pipeline_model_parallel_size", "values": [1, 2], "reference": 1, "ordered": True,
     "mechanism": "virtual_pipeline"},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

#: log-speedups of each setting on its own (the grouped GEMM's dependence on EP is in evaluate)
SPEED = {
    ("fp8", True): 0.10,
    ("tensor_model_parallel_size", 2): 0.05,
    ("expert_model_parallel_size", 4): 0.06, ("expert_model_parallel_size", 8): 0.09,
    ("moe_token_dispatcher_type", "alltoall"): 0.01,
    ("torch_compile", True): 0.04,
    ("attention_backend", "flash"): 0.07,
    ("optimizer_impl", "te_fused"): 0.02,
    ("micro_batch_size", 2): 0.03, ("micro_batch_size", 4): 0.04,
    ("recompute_activations", True): -0.16,
    ("overlap_grad_reduce", True): 0.01,
    ("virtual_pipeline_model_parallel_size", 2): 0.05,
    ("num_workers", 8): 0.005,
}
GROUPED_GEMM_GAIN = 0.05  # with four experts per GPU (EP2); scaled by (experts per GPU - 1) / 3


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB) of a configuration (see the module docstring)."""
    tp, ep, mbs = int(c["tensor_model_parallel_size"]), int(c["expert_model_parallel_size"]), int(c["micro_batch_size"])
    per_seq = 20.0 / tp
    if c["recompute_activations"]:
        per_seq *= 0.3
    per_seq -= (5.0 if c["attention_backend"] == "flash" else 0.0) / tp
    per_seq = max(per_seq, 1.0)
    if int(c["virtual_pipeline_model_parallel_size"]) > 1:
        per_seq *= 1.1
    dispatch = 1.5 * ep / 2 if c["moe_token_dispatcher_type"] == "allgather" else 0.5
    return (56.0 / ep + 16.0 + 4.0 / tp + mbs * (per_seq + dispatch) + (1.5 if c["fp8"] else 0.0)
            - (1.0 if c["torch_compile"] else 0.0))


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["fp8"] and config["moe_grouped_gemm"]:
        return {"status": "crash", "reason": "FP8 grouped GEMM: tokens per expert not padded to a multiple of 16"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["moe_grouped_gemm"]:
        logsp += GROUPED_GEMM_GAIN * (8 // int(config["expert_model_parallel_size"]) - 1) / 3
    loss = 2.12 * (1.004 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
