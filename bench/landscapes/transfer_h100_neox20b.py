"""Transfer target/source: the GPT-NeoX-style 20B dense model (seq 2048) of ``transfer_h20_neox20b.py`` on four
8x H100 SXM nodes (InfiniBand; 989 TFLOP/s dense BF16, 3.35 TB/s, 80 GiB), launched by a NeMo-style trainer with
other flag names (``model.fp8``, ``model.tensor_model_parallel_size``, ``model.optim.zero_stage``, ...).  The knobs
carry the same ``mechanism`` names and ``canonical`` value maps, so experience moves between the two.

Held out for issue 13 (session 13): written after the sign-unknown probe (``probes.contrarian``, commit
``b8630e5``) and committed before it was ever measured; the constants are not to be tuned on the outcome.

Same fixed layout and memory model as the twin, on 80 GiB.  With GEMMs six times faster and the same network, the
step is closer to communication-bound:

* Sign flip against the H20: TP2 -0.06 (+0.04: the per-layer all-reduces no longer hide behind slow GEMMs);
  sequence parallelism still trims the TP all-reduce (+0.02 on top of TP).
* Same sign, other size: FP8 +0.05 (+0.12), TP4 -0.12 (-0.03), ZeRO-2 +0.01 (+0.02), ZeRO-3 -0.10 (-0.05), comm
  overlap +0.06 (+0.03), the 500 MB bucket +0.03 (+0.01).
* Kernel levers: flash attention +0.10, fused Adam +0.03, micro-batch 2 +0.05 and 4 +0.07, activation
  checkpointing -0.15.

Peak: FP8, ZeRO-2, overlap, the large bucket, flash, fused Adam, micro-batch 4 (fits with flash attention), 8
workers.  Micro-batch 4 without flash attention runs out of memory at TP1 (87 GiB).

Failures (the software's, as on the twin): FP8 with ZeRO-3 crashes; sequence parallelism without tensor
parallelism crashes.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 32
REF_STEP_S = 2.2
ENVIRONMENT = {"gpu_sku": "H100", "gpu_mem_gib": 80.0, "peak_tflops": 989.0, "bandwidth_gbs": 3350.0,
               "gpus_per_node": 8, "nodes": 4, "interconnect": "infiniband", "framework": "torch",
               "model_family": "neox", "params": 20e9, "seq_len": 2048, "parallel": "tp1-pp4-dp8"}

KNOBS = [
    {"name": "model.fp8", "values": ["off", "hybrid"], "reference": "off", "mechanism": "low_precision_gemm",
     "canonical": {"hybrid": "on"}},
    {"name": "model.tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -25.0}},
    {"name": "model.sequence_parallel", "values": [0, 1], "reference": 0, "mechanism": "sequence_parallel",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "model.optim.zero_stage", "values": [1, 2, 3], "reference": 1, "ordered": True,
     "mechanism": "zero_stage", "mem_prior_gib": {2: -8.0, 3: -15.0}},
    {"name": "model.optim.overlap_grad_sync", "values": [0, 1], "reference": 0, "mechanism": "comm_overlap",
     "canonical": {"0": "off", "1": "on"}},
    {"name": "model.optim.bucket_cap_mb", "values": [200, 500], "reference": 200, "mechanism": "grad_bucket",
     "canonical": {"200": "200mb", "500": "500mb"}},
    {"name": "model.attention_backend", "values": ["unfused", "flash"], "reference": "unfused",
     "mechanism": "attention_kernel", "canonical": {"unfused": "sdpa"}, "prior_mean": {"flash": 0.03}},
    {"name": "model.optim.name", "values": ["adam", "fused_adam"], "reference": "adam",
     "mechanism": "optimizer_fusion", "canonical": {"adam": "loop", "fused_adam": "fused"},
     "prior_mean": {"fused_adam": 0.01}},
    {"name": "model.micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "mem_prior_gib": {2: 12.0, 4: 36.0}},
    {"name": "model.activations_checkpoint_granularity", "values": ["none", "full"], "reference": "none",
     "mechanism": "activation_checkpointing", "canonical": {"none": "off", "full": "on"},
     "prior_mean": {"full": -0.10}, "mem_prior_gib": {"full": -9.0}},
    {"name": "data.num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("model.fp8", "hybrid"): 0.05,
    ("model.tensor_model_parallel_size", 2): -0.06, ("model.tensor_model_parallel_size", 4): -0.12,
    ("model.sequence_parallel", 1): 0.02,
    ("model.optim.zero_stage", 2): 0.01, ("model.optim.zero_stage", 3): -0.10,
    ("model.optim.overlap_grad_sync", 1): 0.06,
    ("model.optim.bucket_cap_mb", 500): 0.03,
    ("model.attention_backend", "flash"): 0.10,
    ("model.optim.name", "fused_adam"): 0.03,
    ("model.micro_batch_size", 2): 0.05, ("model.micro_batch_size", 4): 0.07,
    ("model.activations_checkpoint_granularity", "full"): -0.15,
    ("data.num_workers", 8): 0.005,
}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the twin's model (see ``transfer_h20_neox20b.py``)."""
    tp, zero = int(c["model.tensor_model_parallel_size"]), int(c["model.optim.zero_stage"])
    mbs = int(c["model.micro_batch_size"])
    weights = 10.0 / tp / (8.0 if zero == 3 else 1.0) + (2.0 if zero == 3 else 0.0)
    grads = 10.0 / tp / (8.0 if zero >= 2 else 1.0)
    act = 12.0 / tp * (0.6 if c["model.sequence_parallel"] else 1.0) \
        - (3.0 / tp if c["model.attention_backend"] == "flash" else 0.0)
    if c["model.activations_checkpoint_granularity"] == "full":
        act *= 0.25
    return weights + grads + 15.0 / tp + mbs * act + (1.5 / tp if c["model.fp8"] == "hybrid" else 0.0) + 4.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["model.fp8"] == "hybrid" and int(config["model.optim.zero_stage"]) == 3:
        return {"status": "crash", "reason": "Transformer Engine FP8 with ZeRO-3: partitioned parameters have no "
                                             "FP8 metadata"}
    if config["model.sequence_parallel"] and int(config["model.tensor_model_parallel_size"]) == 1:
        return {"status": "crash", "reason": "sequence parallelism requires tensor model parallel size > 1"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.05 * (1.003 if config["model.fp8"] == "hybrid" else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
