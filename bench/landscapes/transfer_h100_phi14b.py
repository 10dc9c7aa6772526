"""Transfer target/source: the Phi-style 14B dense model (seq 4096) of ``transfer_a100_phi14b.py`` on two 8x H100
80 GB nodes (InfiniBand; 989 TFLOP/s dense BF16, 3.35 TB/s, 80 GiB), launched by an accelerate-style trainer with
other flag names (``mixed_precision_fp8``, ``tp_size``, ``activation_checkpointing``, ...).  The knobs carry the
same ``mechanism`` names and ``canonical`` value maps, so experience moves between the two.

Held out for issue 13 (session 16), written and committed with its twin before either was measured.

Same fixed layout and memory model as the twin, on 80 GiB.  With GEMMs three times faster and the same network,
the step is closer to communication-bound:

* Sign flips against the A100: TP2 -0.03 (+0.04), TP4 -0.08 (+0.02), the 400 MB bucket +0.03 (-0.02); FP8
  +0.06 (crashes on the A100).
* Same sign, other size: comm overlap +0.04 (+0.03), the 100 MB bucket +0.02 (+0.01).
* Kernel levers: flash attention +0.10, torch.compile +0.04, the fused optimizer +0.02, micro-batch 2 +0.04 and
  4 +0.06; no activation checkpointing +0.12.

Failures (the software's, as on the twin): torch.compile with comm overlap crashes.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 16
REF_STEP_S = 1.6
ENVIRONMENT = {"gpu_sku": "H100", "gpu_mem_gib": 80.0, "peak_tflops": 989.0, "bandwidth_gbs": 3350.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "phi", "params": 14e9, "seq_len": 4096, "parallel": "fsdp16"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "mixed_precision_fp8", "values": ["no", "yes"], "reference": "no", "mechanism": "low_precision_gemm",
     "canonical": {"no": "off", "yes": "on"}},
    {"name": "tp_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -8.0, 4: -12.0}},
    {"name": "fsdp_comm_overlap", "values": [0, 1], "reference": 0, "mechanism": "comm_overlap",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "bucket_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "activation_checkpointing", "values": ["full", "off"], "reference": "full",
     "mechanism": "activation_checkpointing", "canonical": {"full": "on", "off": "off"},
     "prior_mean": {"off": 0.10}, "mem_prior_gib": {"off": 16.0}},
    {"name": "attn_implementation", "values": ["sdpa", "flash_attention_2"], "reference": "sdpa",
     "mechanism": "attention_kernel", "canonical": {"flash_attention_2": "flash"},
     "prior_mean": {"flash_attention_2": 0.06}},
    {"name": "dynamo_backend", "values": ["no", "inductor"], "reference": "no", "mechanism": "graph_compile",
     "canonical": {"no": "off", "inductor": "on"}, "prior_mean": {"inductor": 0.05}},
    {"name": "optim", "values": ["adamw_torch", "adamw_torch_fused"], "reference": "adamw_torch",
     "mechanism": "optimizer_fusion", "canonical": {"adamw_torch": "foreach", "adamw_torch_fused": "fused"},
     "prior_mean": {"adamw_torch_fused": 0.01}},
    {"name": "per_device_train_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 4.0, 4: 12.0}},
    {"name": "dataloader_num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("mixed_precision_fp8", "yes"): 0.06,
    ("tp_size", 2): -0.03, ("tp_size", 4): -0.08,
    ("fsdp_comm_overlap", 1): 0.04,
    ("bucket_mb", 100): 0.02, ("bucket_mb", 400): 0.03,
    ("activation_checkpointing", "off"): 0.12,
    ("attn_implementation", "flash_attention_2"): 0.10,
    ("dynamo_backend", "inductor"): 0.04,
    ("optim", "adamw_torch_fused"): 0.02,
    ("per_device_train_batch_size", 2): 0.04, ("per_device_train_batch_size", 4): 0.06,
    ("dataloader_num_workers", 8): 0.005,
}

ACT = {"full": 3.0, "off": 22.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the A100 twin."""
    tp, mbs = int(c["tp_size"]), int(c["per_device_train_batch_size"])
    act = ACT[c["activation_checkpointing"]] / tp * (0.8 if c["attn_implementation"] == "flash_attention_2" else 1.0)
    return 14.0 / tp + mbs * act + (1.5 / tp if c["mixed_precision_fp8"] == "yes" else 0.0) \
        - (1.0 if c["dynamo_backend"] == "inductor" else 0.0) + 5.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["dynamo_backend"] == "inductor" and config["fsdp_comm_overlap"]:
        return {"status": "crash", "reason": "the overlap's backward hooks break the compiled graph"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.05 * (1.002 if config["mixed_precision_fp8"] == "yes" else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
