"""Transfer source/target: a GPT-NeoX-style 20B dense model (seq 2048) on four 8x H20 nodes (InfiniBand; 148
TFLOP/s dense BF16, 4 TB/s, 96 GiB), launched by Megatron-DeepSpeed with its flag names.  Its twin
``transfer_h100_neox20b.py`` is the same model and layout on four 8x H100 nodes (80 GiB) under a NeMo-style
launcher with other flag names and the same ``mechanism`` fields.

Held out for issue 13 (session 13): written after the sign-unknown probe (``probes.contrarian``, commit
``b8630e5``) and committed before it was ever measured; the constants are not to be tuned on the outcome.

Layout (fixed): pipeline parallel 4 (11 layers a stage), the rest data parallel (8 at TP1), ZeRO-1 optimizer
sharding in the reference, 1F1B schedule.

What the hardware does:

* H20 is compute-bound: FP8 GEMMs help a lot (+0.12); TP2 over NVLink helps (+0.04: the GEMMs are slow, the
  all-reduces cheap beside them) and sequence parallelism on top of it a little more (+0.03); TP4 costs (-0.03);
  ZeRO-2 helps a little (+0.02: smaller gradient buffers, the reduce-scatter hides), ZeRO-3 costs (-0.05: a
  parameter all-gather per micro-batch); comm overlap +0.03, a 500 MB reduce bucket +0.01.
* H100 (see the twin): six times faster GEMMs, the same network: FP8 helps less (+0.05), TP2 costs (-0.06, a
  sign flip), ZeRO-3 costs more (-0.10), comm overlap and the larger bucket are worth more (+0.06, +0.03).
* Kernel levers on both, by similar amounts: flash attention, fused Adam, micro-batch 2 and 4 (bounded by memory),
  activation checkpointing costs a fifth of a compute-bound step (-0.18; -0.15 on the H100).

Memory per GPU (GiB, the same model on both SKUs): bf16 weights 10 / TP, fp32 gradients 10 / TP (ZeRO-2 and -3:
/ 8), Adam state and master weights 15 / TP (sharded over the data-parallel group already), ZeRO-3 also shards
the weights (/ 8) and adds a 2 GiB gather buffer; activations per micro-batch 12 / TP (x0.6 with sequence
parallelism, less 3 / TP with flash attention, x0.25 with checkpointing); FP8 weight copies 1.5 / TP; runtime and
NCCL 4.  The reference needs 51 GiB.  Micro-batch 4 fits the H20's 96 GiB at TP1; on the H100's 80 GiB only with
flash attention, TP2, ZeRO-2/3 or checkpointing.

Failures (the software's, both SKUs): Transformer Engine FP8 with ZeRO-3 crashes (the partitioned parameters have
no FP8 metadata); sequence parallelism without tensor parallelism crashes (Megatron asserts TP > 1).
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 96.0
GPUS = 32
REF_STEP_S = 6.0
ENVIRONMENT = {"gpu_sku": "H20", "gpu_mem_gib": 96.0, "peak_tflops": 148.0, "bandwidth_gbs": 4000.0,
               "gpus_per_node": 8, "nodes": 4, "interconnect": "infiniband", "framework": "torch",
               "model_family": "neox", "params": 20e9, "seq_len": 2048, "parallel": "tp1-pp4-dp8"}

#: generic priors (the same on both landscapes; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -25.0}},
    {"name": "sequence_parallel", "values": [False, True], "reference": False, "mechanism": "sequence_parallel",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "zero_stage", "values": [1, 2, 3], "reference": 1, "ordered": True, "mechanism": "zero_stage",
     "mem_prior_gib": {2: -8.0, 3: -15.0}},
    {"name": "overlap_comm", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "reduce_bucket_size", "values": [200000000, 500000000], "reference": 200000000,
     "mechanism": "grad_bucket", "canonical": {"200000000": "200mb", "500000000": "500mb"}},
    {"name": "use_flash_attn", "values": [False, True], "reference": False, "mechanism": "attention_kernel",
     "canonical": {"False": "sdpa", "True": "flash"}, "prior_mean": {True: 0.03}},
    {"name": "optimizer", "values": ["adam", "fusedadam"], "reference": "adam", "mechanism": "optimizer_fusion",
     "canonical": {"adam": "loop", "fusedadam": "fused"}, "prior_mean": {"fusedadam": 0.01}},
    {"name": "micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 12.0, 4: 36.0}},
    {"name": "checkpoint_activations", "values": [False, True], "reference": False,
     "mechanism": "activation_checkpointing", "canonical": {"False": "off", "True": "on"},
     "prior_mean": {True: -0.10}, "mem_prior_gib": {True: -9.0}},
    {"name": "num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("fp8", True): 0.12,
    ("tensor_model_parallel_size", 2): 0.04, ("tensor_model_parallel_size", 4): -0.03,
    ("sequence_parallel", True): 0.03,
    ("zero_stage", 2): 0.02, ("zero_stage", 3): -0.05,
    ("overlap_comm", True): 0.03,
    ("reduce_bucket_size", 500000000): 0.01,
    ("use_flash_attn", True): 0.08,
    ("optimizer", "fusedadam"): 0.02,
    ("micro_batch_size", 2): 0.04, ("micro_batch_size", 4): 0.06,
    ("checkpoint_activations", True): -0.18,
    ("num_workers", 8): 0.005,
}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H100 twin (see the module docstring)."""
    tp, zero, mbs = int(c["tensor_model_parallel_size"]), int(c["zero_stage"]), int(c["micro_batch_size"])
    weights = 10.0 / tp / (8.0 if zero == 3 else 1.0) + (2.0 if zero == 3 else 0.0)
    grads = 10.0 / tp / (8.0 if zero >= 2 else 1.0)
    act = 12.0 / tp * (0.6 if c["sequence_parallel"] else 1.0) - (3.0 / tp if c["use_flash_attn"] else 0.0)
    if c["checkpoint_activations"]:
        act *= 0.25
    return weights + grads + 15.0 / tp + mbs * act + (1.5 / tp if c["fp8"] else 0.0) + 4.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["fp8"] and int(config["zero_stage"]) == 3:
        return {"status": "crash", "reason": "Transformer Engine FP8 with ZeRO-3: partitioned parameters have no "
                                             "FP8 metadata"}
    if config["sequence_parallel"] and int(config["tensor_model_parallel_size"]) == 1:
        return {"status": "crash", "reason": "sequence parallelism requires tensor model parallel size > 1"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.05 * (1.003 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
