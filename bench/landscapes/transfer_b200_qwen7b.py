"""Transfer target/source: the Qwen2.5-7B-style dense model (seq 16384) of ``transfer_l40s_qwen7b.py`` on two 8x
B200 nodes (NVLink 5 inside a node, 8x 400 Gb InfiniBand between nodes; 2250 TFLOP/s dense BF16, 8 TB/s, 180
GiB), launched by a torchtitan-style trainer with other flag names (``--float8``, ``--tensor-parallel-degree``,
``--reshard-after-forward``, ``--ac-mode``, ...).  The knobs carry the same ``mechanism`` names and ``canonical``
value maps, so experience moves between the two.

Held out for issue 13 (session 5): written and committed before any change to the experience or refine code of
that session and before it was ever measured; the constants are not to be tuned on the benchmark's outcome.

Same fixed layout as the twin (FSDP full shard over 16 ranks, recompute on, SDPA, unfused cross-entropy).  With
GEMMs six times faster than on the L40S and NVLink 5 / InfiniBand instead of PCIe / Ethernet, the FSDP traffic is
hidden and what remains is kernel and launch overhead:

* Sign flips against the L40S: TP2 +0.03 (-0.09: over NVLink the per-layer all-reduces are cheap, and the FSDP
  all-gathers over InfiniBand shrink with the smaller data-parallel group); backward prefetch -0.01 (+0.04: the
  traffic is already hidden, and the early all-gather competes with the reduce-scatter for SMs and links).
* Same sign, different size: FP8 GEMMs (MXFP8) +0.07 (+0.11), TP4 -0.03 (-0.20), CP2 -0.015 (-0.07),
  SHARD_GRAD_OP +0.01 (+0.06), bf16 reduce-scatter +0.01 (+0.05).
* Kernel levers: no recompute +0.18, flash attention (cuDNN) +0.10, compile +0.07, the fused linear cross-entropy
  +0.04, fused RMSNorm +0.02, micro-batch 2 +0.04.  The kernel levers alone reach about four fifths of the peak
  log-speedup (peak 1.777x: all of them, FP8, TP2, SHARD_GRAD_OP, bf16 reduce); 90% needs FP8.

Memory: the twin's per-GPU model on 180 GiB; every configuration fits (the largest, micro-batch 2 without
recompute at TP1/CP1 with SHARD_GRAD_OP, SDPA and the unfused cross-entropy, needs 143 GiB).  Context parallelism
works here with the cuDNN flash backend (it is an SDPA backend); no crash.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 180.0
GPUS = 16
REF_STEP_S = 2.0
ENVIRONMENT = {"gpu_sku": "B200", "gpu_mem_gib": 180.0, "peak_tflops": 2250.0, "bandwidth_gbs": 8000.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "qwen", "params": 7.6e9, "seq_len": 16384, "parallel": "tp1-pp1-dp16"}

KNOBS = [
    {"name": "float8", "values": ["off", "mxfp8"], "reference": "off", "mechanism": "low_precision_gemm",
     "canonical": {"mxfp8": "on"}},
    {"name": "tensor_parallel_degree", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -22.0}},
    {"name": "context_parallel_degree", "values": [1, 2], "reference": 1, "ordered": True,
     "mechanism": "context_parallel", "mem_prior_gib": {2: -10.0}},
    {"name": "reshard_after_forward", "values": ["always", "never"], "reference": "always",
     "mechanism": "zero_stage", "canonical": {"always": "3", "never": "2"}, "mem_prior_gib": {"never": 13.0}},
    {"name": "prefetch_depth", "values": [0, 1], "reference": 0, "mechanism": "fsdp_prefetch",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "mixed_precision_reduce", "values": ["float32", "bfloat16"], "reference": "float32",
     "mechanism": "grad_reduce_dtype"},
    {"name": "ac_mode", "values": ["full", "none"], "reference": "full", "mechanism": "activation_checkpointing",
     "canonical": {"full": "on", "none": "off"}, "prior_mean": {"none": 0.08}, "mem_prior_gib": {"none": 30.0}},
    {"name": "compile", "values": [0, 1], "reference": 0, "mechanism": "graph_compile",
     "canonical": {"0": "off", "1": "on"}, "prior_mean": {1: 0.03}},
    {"name": "sdpa_backend", "values": ["efficient", "cudnn_flash"], "reference": "efficient",
     "mechanism": "attention_kernel", "canonical": {"efficient": "sdpa", "cudnn_flash": "flash"},
     "prior_mean": {"cudnn_flash": 0.03}},
    {"name": "fused_linear_ce", "values": [0, 1], "reference": 0, "mechanism": "fused_cross_entropy",
     "canonical": {"0": "off", "1": "on"}, "mem_prior_gib": {1: -12.0}},
    {"name": "rmsnorm_impl", "values": ["torch", "fused"], "reference": "torch", "mechanism": "fused_rmsnorm",
     "canonical": {"torch": "off", "fused": "on"}},
    {"name": "local_batch_size", "values": [1, 2], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 20.0}},
    {"name": "data_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("float8", "mxfp8"): 0.07,
    ("tensor_parallel_degree", 2): 0.03, ("tensor_parallel_degree", 4): -0.03,
    ("context_parallel_degree", 2): -0.015,
    ("reshard_after_forward", "never"): 0.01,
    ("prefetch_depth", 1): -0.01,
    ("mixed_precision_reduce", "bfloat16"): 0.01,
    ("ac_mode", "none"): 0.18,
    ("compile", 1): 0.07,
    ("sdpa_backend", "cudnn_flash"): 0.10,
    ("fused_linear_ce", 1): 0.04,
    ("rmsnorm_impl", "fused"): 0.02,
    ("local_batch_size", 2): 0.04,
    ("data_workers", 8): 0.005,
}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the L40S twin."""
    tp, cp, mbs = int(c["tensor_parallel_degree"]), int(c["context_parallel_degree"]), int(c["local_batch_size"])
    flash = c["sdpa_backend"] == "cudnn_flash"
    if c["ac_mode"] == "full":
        act = 5.0 - (0.5 if flash else 0.0)
    else:
        act = 40.0 - (6.0 if flash else 0.0)
    logits = 1.5 if c["fused_linear_ce"] else 18.0
    working = 1.5 + (1.0 if c["prefetch_depth"] else 0.0)
    gathered = 13.0 if c["reshard_after_forward"] == "never" else 0.0
    return (7.1 + 3.0 + (working + gathered + (1.5 if c["float8"] == "mxfp8" else 0.0)) / tp
            + mbs * (act + logits) / (tp * cp) - (1.0 if c["compile"] else 0.0))


def evaluate(config: dict, patches: list, rng) -> dict:
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.31 * (1.003 if config["float8"] == "mxfp8" else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
