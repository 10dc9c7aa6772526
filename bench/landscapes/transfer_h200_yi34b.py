"""Transfer target/source: the Yi-style 34B dense model (seq 8192) of ``transfer_h20_yi34b.py`` on two 8x H200
nodes (InfiniBand; 989 TFLOP/s dense BF16, 4.8 TB/s, 141 GiB), launched by a torchtitan-style trainer with other
flag names (``float8``, ``tensor_parallel_degree``, ``ac_mode``, ...).  The knobs carry the same ``mechanism``
names and ``canonical`` value maps, so experience moves between the two.

Held out for issue 13 (session 15), written and committed with its twin before either was measured.

Same fixed layout and memory model as the twin, on 141 GiB.  With GEMMs seven times faster and the same network,
the step is closer to communication-bound:

* Sign flips against the H20: TP2 -0.05 (+0.05), TP4 -0.11 (+0.01), the 400 MB bucket +0.04 (-0.01).
* Same sign, other size: FP8 +0.04 (+0.11), comm overlap +0.06 (+0.02), the 100 MB bucket +0.02 (+0.01).
* Kernel levers: flash attention +0.11, torch.compile +0.05, the fused optimizer +0.02, micro-batch 2 +0.04;
  no activation checkpointing +0.13.

Peak: no checkpointing at micro-batch 2, TP1, FP8, flash attention, compile, the fused optimizer, overlap, the
400 MB bucket, 8 workers (109 GiB).

Failures (the software's, as on the twin): torch.compile at TP4 crashes; FP8 without flash attention crashes.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 141.0
GPUS = 16
REF_STEP_S = 1.4
ENVIRONMENT = {"gpu_sku": "H200", "gpu_mem_gib": 141.0, "peak_tflops": 989.0, "bandwidth_gbs": 4800.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "llama", "params": 34e9, "seq_len": 8192, "parallel": "fsdp16"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "float8", "values": [0, 1], "reference": 0, "mechanism": "low_precision_gemm",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "tensor_parallel_degree", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -20.0, 4: -30.0}},
    {"name": "fsdp_overlap", "values": ["off", "on"], "reference": "off", "mechanism": "comm_overlap"},
    {"name": "bucket_cap_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "ac_mode", "values": ["full", "none"], "reference": "full",
     "mechanism": "activation_checkpointing", "prior_mean": {"none": 0.10}, "mem_prior_gib": {"none": 38.0}},
    {"name": "sdpa_backend", "values": ["math", "flash"], "reference": "math", "mechanism": "attention_kernel",
     "canonical": {"math": "sdpa"}, "prior_mean": {"flash": 0.06}},
    {"name": "compile", "values": [0, 1], "reference": 0, "mechanism": "graph_compile",
     "canonical": {"0": "off", "1": "on"}, "prior_mean": {1: 0.05}},
    {"name": "fused_optimizer", "values": [0, 1], "reference": 0, "mechanism": "optimizer_fusion",
     "canonical": {"0": "foreach", "1": "fused"}, "prior_mean": {1: 0.01}},
    {"name": "local_batch_size", "values": [1, 2], "reference": 1, "ordered": True, "mechanism": "micro_batch",
     "mem_prior_gib": {2: 10.0}},
    {"name": "data_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("float8", 1): 0.04,
    ("tensor_parallel_degree", 2): -0.05, ("tensor_parallel_degree", 4): -0.11,
    ("fsdp_overlap", "on"): 0.06,
    ("bucket_cap_mb", 100): 0.02, ("bucket_cap_mb", 400): 0.04,
    ("ac_mode", "none"): 0.13,
    ("sdpa_backend", "flash"): 0.11,
    ("compile", 1): 0.05,
    ("fused_optimizer", 1): 0.02,
    ("local_batch_size", 2): 0.04,
    ("data_workers", 8): 0.005,
}

ACT = {"full": 6.0, "none": 44.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H20 twin."""
    tp, mbs = int(c["tensor_parallel_degree"]), int(c["local_batch_size"])
    act = ACT[c["ac_mode"]] / tp * (0.8 if c["sdpa_backend"] == "flash" else 1.0)
    return 30.0 / tp + mbs * act + (3.0 / tp if c["float8"] else 0.0) - (2.0 if c["compile"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["compile"] and int(config["tensor_parallel_degree"]) == 4:
        return {"status": "crash", "reason": "torch.compile cannot trace the TP4 DTensor sharding"}
    if config["float8"] and config["sdpa_backend"] != "flash":
        return {"status": "crash", "reason": "FP8 attention path requires flash attention"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 1.92 * (1.003 if config["float8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
