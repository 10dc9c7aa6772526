"""Transfer source/target: a Qwen2.5-7B-style dense model (7.6B parameters, vocabulary 152k, seq 16384) trained
with FSDP over two 8x L40S nodes (PCIe Gen4, no NVLink; 2x 100 GbE RoCE between nodes; 362 TFLOP/s dense BF16,
864 GB/s, 48 GiB), flags in Hugging Face Trainer / accelerate style.  Its twin ``transfer_b200_qwen7b.py`` is the
same model and data on two 8x B200 nodes (NVLink 5, InfiniBand) with torchtitan-style flag names and the same
``mechanism`` fields.

Held out for issue 13 (session 5): written and committed before any change to the experience or refine code of
that session and before it was ever measured; the constants are not to be tuned on the benchmark's outcome.

Layout (fixed): FSDP full shard over the 16 ranks (data parallel 16), activation recompute on in the reference
(without it the reference does not fit a 48 GiB card), SDPA attention, unfused cross-entropy over the 152k
vocabulary (full fp32 logits and their gradient: about 18 GiB per sequence).

What the hardware does:

* L40S is compute-bound and its GPU-to-GPU traffic crosses PCIe and Ethernet: FP8 GEMMs help (+0.11, Ada FP8
  tensor cores, large GEMMs at seq 16k); tensor parallelism is costly (TP2 -0.09, TP4 -0.20: two all-reduces per
  layer over PCIe); context parallelism costs (CP2 -0.07: ring-attention sends over PCIe); whatever cuts or hides
  FSDP traffic helps: SHARD_GRAD_OP (+0.06: no parameter re-gather in backward), backward prefetch (+0.04), bf16
  gradient reduce-scatter (+0.05).
* B200 (see the twin): TP2 helps a little and backward prefetch costs a little (sign flips); the FSDP levers are
  worth about 1% since NVLink 5 hides the traffic.
* Kernel levers help on both: no recompute (+0.22 here: the recompute forward is a quarter of a compute-bound
  step), flash attention, compile, the fused linear cross-entropy, fused RMSNorm, micro-batch 2.

Memory per GPU (GiB, the same model on both SKUs): sharded parameters, gradients and Adam state 7.1; unsharded
working layers 1.5 / TP (+1 / TP with backward prefetch); SHARD_GRAD_OP keeps the bf16 parameters gathered after
forward, +13 / TP; activations per sequence 5 / (TP x CP) with recompute, 40 / (TP x CP) without (less 0.5 resp.
6 with flash attention); logits per sequence 18 / (TP x CP), 1.5 with the fused cross-entropy; FP8 weight copies
+1.5 / TP; compile -1; runtime and NCCL buffers 3.  The reference needs 34.6 GiB; recompute off fits the 48 GiB
only with flash attention and the fused cross-entropy (or with TP/CP), not with both FP8 and backward prefetch,
never with SHARD_GRAD_OP or micro-batch 2 at TP1.  Peak 1.768x (FP8, TP2, SHARD_GRAD_OP, prefetch, bf16 reduce,
recompute off and every kernel lever but micro-batch 2; 35 GiB); the best TP1 configuration is within 1% of it
(FP8, bf16 reduce, recompute off, flash, compile, both fused kernels).  The kernel levers alone reach 70% of the
peak log-speedup.

Failure: context parallelism with the ``flash_attention_2`` kernel crashes (Hugging Face's flash-attention path has
no ring attention; context parallelism needs SDPA).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 48.0
GPUS = 16
REF_STEP_S = 9.5
ENVIRONMENT = {"gpu_sku": "L40S", "gpu_mem_gib": 48.0, "peak_tflops": 362.0, "bandwidth_gbs": 864.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "roce", "framework": "torch",
               "model_family": "qwen", "params": 7.6e9, "seq_len": 16384, "parallel": "tp1-pp1-dp16"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tp", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "tensor_parallel",
     "mem_prior_gib": {2: -15.0, 4: -22.0}},
    {"name": "cp", "values": [1, 2], "reference": 1, "ordered": True, "mechanism": "context_parallel",
     "mem_prior_gib": {2: -10.0}},
    {"name": "fsdp_sharding_strategy", "values": ["FULL_SHARD", "SHARD_GRAD_OP"], "reference": "FULL_SHARD",
     "mechanism": "zero_stage", "mem_prior_gib": {"SHARD_GRAD_OP": 13.0}},
    {"name": "fsdp_backward_prefetch", "values": ["NO_PREFETCH", "BACKWARD_PRE"], "reference": "NO_PREFETCH",
     "mechanism": "fsdp_prefetch", "canonical": {"NO_PREFETCH": "off", "BACKWARD_PRE": "on"}},
    {"name": "fsdp_reduce_dtype", "values": ["fp32", "bf16"], "reference": "fp32", "mechanism": "grad_reduce_dtype"},
    {"name": "gradient_checkpointing", "values": [True, False], "reference": True,
     "mechanism": "activation_checkpointing", "canonical": {"True": "on", "False": "off"},
     "prior_mean": {False: 0.08}, "mem_prior_gib": {False: 30.0}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "attn_implementation", "values": ["sdpa", "flash_attention_2"], "reference": "sdpa",
     "mechanism": "attention_kernel", "prior_mean": {"flash_attention_2": 0.03}},
    {"name": "use_liger_fused_linear_cross_entropy", "values": [False, True], "reference": False,
     "mechanism": "fused_cross_entropy", "canonical": {"False": "off", "True": "on"}, "mem_prior_gib": {True: -12.0}},
    {"name": "use_liger_rms_norm", "values": [False, True], "reference": False, "mechanism": "fused_rmsnorm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "per_device_train_batch_size", "values": [1, 2], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "mem_prior_gib": {2: 20.0}},
    {"name": "dataloader_num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("fp8", True): 0.11,
    ("tp", 2): -0.09, ("tp", 4): -0.20,
    ("cp", 2): -0.07,
    ("fsdp_sharding_strategy", "SHARD_GRAD_OP"): 0.06,
    ("fsdp_backward_prefetch", "BACKWARD_PRE"): 0.04,
    ("fsdp_reduce_dtype", "bf16"): 0.05,
    ("gradient_checkpointing", False): 0.22,
    ("torch_compile", True): 0.05,
    ("attn_implementation", "flash_attention_2"): 0.08,
    ("use_liger_fused_linear_cross_entropy", True): 0.03,
    ("use_liger_rms_norm", True): 0.015,
    ("per_device_train_batch_size", 2): 0.02,
    ("dataloader_num_workers", 8): 0.005,
}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the B200 twin."""
    tp, cp, mbs = int(c["tp"]), int(c["cp"]), int(c["per_device_train_batch_size"])
    flash = c["attn_implementation"] == "flash_attention_2"
    if c["gradient_checkpointing"]:
        act = 5.0 - (0.5 if flash else 0.0)
    else:
        act = 40.0 - (6.0 if flash else 0.0)
    logits = 1.5 if c["use_liger_fused_linear_cross_entropy"] else 18.0
    working = 1.5 + (1.0 if c["fsdp_backward_prefetch"] == "BACKWARD_PRE" else 0.0)
    gathered = 13.0 if c["fsdp_sharding_strategy"] == "SHARD_GRAD_OP" else 0.0
    return (7.1 + 3.0 + (working + gathered + (1.5 if c["fp8"] else 0.0)) / tp + mbs * (act + logits) / (tp * cp)
            - (1.0 if c["torch_compile"] else 0.0))


def evaluate(config: dict, patches: list, rng) -> dict:
    if int(config["cp"]) > 1 and config["attn_implementation"] == "flash_attention_2":
        return {"status": "crash", "reason": "context parallelism needs SDPA attention (flash_attention_2 has no "
                                             "ring attention)"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.31 * (1.003 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
