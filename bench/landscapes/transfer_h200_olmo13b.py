"""Transfer target/source: the OLMo-style 13B dense model (seq 4096) of ``transfer_a100_olmo13b.py`` on one 8x H200
node (NVLink 4; 989 TFLOP/s dense BF16, 4.8 TB/s, 141 GiB), launched by a Lightning-style trainer with other flag
names (``fsdp_sharding``, ``tp``, ``activation_checkpoint``, ...).  The knobs carry the same ``mechanism`` names
and ``canonical`` value maps, so experience moves between the two.

Held out for issues 13 and 15 (session 33), written and committed with its twin before either was measured.

Same layout and memory model as the twin, on 141 GiB; the compute is three times faster, so communication and
small GEMMs weigh more:

* Sign flips against the A100: the 400 MB bucket +0.03 (-0.01), tensor parallelism 2 +0.02 (-0.05).
* Same sign, other size: ZeRO-2 +0.06 (+0.03), comm overlap +0.07 (+0.04), the 100 MB bucket +0.01 (+0.02),
  flash attention +0.11 (+0.09), torch.compile +0.04 (+0.07), the fused optimizer +0.02 (+0.03), selective
  checkpointing +0.04 (+0.06) and none +0.06 (+0.09), micro-batch 2 +0.06 (+0.04) and 4 +0.09 (+0.05), more
  loader workers +0.01.

ZeRO-2 with no checkpointing fits at micro-batch 4 with flash attention (131.6 GiB) and not without it.

Failures (the software's, as on the twin): torch.compile with selective activation checkpointing crashes.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 141.0
GPUS = 8
REF_STEP_S = 1.9
ENVIRONMENT = {"gpu_sku": "H200", "gpu_mem_gib": 141.0, "peak_tflops": 989.0, "bandwidth_gbs": 4800.0,
               "gpus_per_node": 8, "nodes": 1, "interconnect": "nvlink", "framework": "torch",
               "model_family": "olmo", "params": 13e9, "seq_len": 4096, "parallel": "fsdp8"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "fsdp_sharding", "values": ["full_shard", "shard_grad_op"], "reference": "full_shard",
     "mechanism": "zero_stage", "canonical": {"full_shard": "3", "shard_grad_op": "2"},
     "mem_prior_gib": {"shard_grad_op": 20.0}},
    {"name": "overlap_comm", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.03}},
    {"name": "bucket_cap_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "tp", "values": [1, 2], "reference": 1, "ordered": True, "mechanism": "tensor_parallel",
     "mem_prior_gib": {2: -15.0}},
    {"name": "activation_checkpoint", "values": ["full", "selective", "none"], "reference": "full",
     "ordered": True, "mechanism": "activation_checkpointing",
     "canonical": {"full": "on", "selective": "selective", "none": "off"},
     "prior_mean": {"selective": 0.05, "none": 0.10}, "mem_prior_gib": {"selective": 6.0, "none": 20.0}},
    {"name": "attn_impl", "values": ["sdpa", "flash_attention_2"], "reference": "sdpa",
     "mechanism": "attention_kernel", "canonical": {"flash_attention_2": "flash"},
     "prior_mean": {"flash_attention_2": 0.08}, "mem_prior_gib": {"flash_attention_2": -2.0}},
    {"name": "compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.06}},
    {"name": "fused_adam", "values": [False, True], "reference": False, "mechanism": "optimizer_fusion",
     "canonical": {"False": "foreach", "True": "fused"}, "prior_mean": {True: 0.02}},
    {"name": "mbs", "values": [1, 2, 4], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "prior_mean": {2: 0.03, 4: 0.04}, "mem_prior_gib": {2: 5.0, 4: 15.0}},
    {"name": "loader_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("fsdp_sharding", "shard_grad_op"): 0.06,
    ("overlap_comm", True): 0.07,
    ("bucket_cap_mb", 100): 0.01, ("bucket_cap_mb", 400): 0.03,
    ("tp", 2): 0.02,
    ("activation_checkpoint", "selective"): 0.04, ("activation_checkpoint", "none"): 0.06,
    ("attn_impl", "flash_attention_2"): 0.11,
    ("compile", True): 0.04,
    ("fused_adam", True): 0.02,
    ("mbs", 2): 0.06, ("mbs", 4): 0.09,
    ("loader_workers", 8): 0.01,
}

ACTIVATIONS = {"full": 3.0, "selective": 9.0, "none": 24.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the A100 twin."""
    tp, mbs = int(c["tp"]), int(c["mbs"])
    state = 48.75 if c["fsdp_sharding"] == "shard_grad_op" else 26.0
    act = ACTIVATIONS[c["activation_checkpoint"]] * (0.8 if c["attn_impl"] == "flash_attention_2" else 1.0)
    return state / tp + mbs * act / tp - (1.0 if c["compile"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["compile"] and config["activation_checkpoint"] == "selective":
        return {"status": "crash", "reason": "torch._dynamo: saved-tensor hooks of selective recompute are not traceable"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.005, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": 2.58}
