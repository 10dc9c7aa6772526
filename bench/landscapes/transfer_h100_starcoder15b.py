"""Transfer target/source: the StarCoder2-style 15B code model (seq 16384) of ``transfer_a100_starcoder15b.py`` on
two 8x H100 80 GB nodes (InfiniBand; 989 TFLOP/s dense BF16, 3.35 TB/s, 80 GiB), launched by a NeMo-style trainer
with other flag names (``model.fp8``, ``model.tensor_model_parallel_size``, ...).  The knobs carry the same
``mechanism`` names and ``canonical`` value maps, so experience moves between the two.

Held out for issues 13 and 15 (session 21), written and committed with its twin before either direction or any
slot count was measured; the constants are not to be tuned on the outcome.

Same fixed layout and memory model as the twin, on the same 80 GiB.  With GEMMs three times faster and the same
network, the step is closer to communication- and launch-bound:

* Sign flips against the A100: TP2 -0.04 (+0.03), TP4 -0.10 (-0.02), context parallelism over 2 GPUs +0.02
  (-0.02), the 200 MB bucket +0.02 (-0.01); FP8 +0.05 (crashes on the A100).
* Same sign, other size: comm overlap +0.05 (+0.02), sequence parallelism beside TP +0.03 (+0.02), CUDA graphs
  +0.03 (+0.005).
* Kernel levers: flash attention +0.14, selective recompute +0.10 and none +0.15, the fused cross entropy
  +0.02, micro-batch 2 +0.03 and 4 +0.05.

Failures (the software's, as on the twin): sequence parallelism without tensor parallelism crashes, and CUDA
graphs crash beside context parallelism.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 80.0
GPUS = 16
REF_STEP_S = 3.4
ENVIRONMENT = {"gpu_sku": "H100", "gpu_mem_gib": 80.0, "peak_tflops": 989.0, "bandwidth_gbs": 3350.0,
               "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband", "framework": "torch",
               "model_family": "starcoder", "params": 15e9, "seq_len": 16384, "parallel": "dp16-distopt"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "model.fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "model.tensor_model_parallel_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -15.0, 4: -22.0}},
    {"name": "model.sequence_parallel", "values": [False, True], "reference": False,
     "mechanism": "sequence_parallel", "canonical": {"False": "off", "True": "on"}},
    {"name": "model.context_parallel_size", "values": [1, 2], "reference": 1, "mechanism": "context_parallel"},
    {"name": "model.optim.overlap_grad_sync", "values": [False, True], "reference": False,
     "mechanism": "comm_overlap", "canonical": {"False": "off", "True": "on"}},
    {"name": "model.optim.grad_sync_bucket_mb", "values": [40, 200], "reference": 40, "mechanism": "grad_bucket",
     "canonical": {"40": "40mb", "200": "200mb"}},
    {"name": "model.activations_checkpoint_granularity", "values": ["full", "selective", "none"],
     "reference": "full", "mechanism": "activation_checkpointing",
     "canonical": {"full": "full", "selective": "selective", "none": "off"},
     "prior_mean": {"selective": 0.06, "none": 0.10}, "mem_prior_gib": {"selective": 10.0, "none": 36.0}},
    {"name": "model.use_flash_attention", "values": [False, True], "reference": False,
     "mechanism": "attention_kernel", "canonical": {"False": "sdpa", "True": "flash"}, "prior_mean": {True: 0.08}},
    {"name": "model.cross_entropy_loss_fusion", "values": [False, True], "reference": False,
     "mechanism": "fused_cross_entropy", "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.01}},
    {"name": "model.enable_cuda_graph", "values": [False, True], "reference": False, "mechanism": "cuda_graphs",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "model.micro_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 8.0, 4: 24.0}},
]

SPEED = {
    ("model.fp8", True): 0.05,
    ("model.tensor_model_parallel_size", 2): -0.04, ("model.tensor_model_parallel_size", 4): -0.10,
    ("model.context_parallel_size", 2): 0.02,
    ("model.optim.overlap_grad_sync", True): 0.05,
    ("model.optim.grad_sync_bucket_mb", 200): 0.02,
    ("model.activations_checkpoint_granularity", "selective"): 0.10,
    ("model.activations_checkpoint_granularity", "none"): 0.15,
    ("model.use_flash_attention", True): 0.14,
    ("model.cross_entropy_loss_fusion", True): 0.02,
    ("model.enable_cuda_graph", True): 0.03,
    ("model.micro_batch_size", 2): 0.03, ("model.micro_batch_size", 4): 0.05,
}
#: sequence parallelism's gain, beside TP only
SP_GAIN = 0.03

ACT = {"full": 4.0, "selective": 14.0, "none": 40.0}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the A100 twin (see the module docstring)."""
    tp, cp = int(c["model.tensor_model_parallel_size"]), int(c["model.context_parallel_size"])
    mbs = int(c["model.micro_batch_size"])
    act = ACT[c["model.activations_checkpoint_granularity"]] / (tp * cp)
    act *= 0.6 if c["model.use_flash_attention"] else 1.0
    return 30.0 / tp + mbs * act + (1.5 / tp if c["model.fp8"] else 0.0) + 6.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["model.sequence_parallel"] and int(config["model.tensor_model_parallel_size"]) == 1:
        return {"status": "crash", "reason": "sequence parallelism requires tensor model parallelism"}
    if config["model.enable_cuda_graph"] and int(config["model.context_parallel_size"]) > 1:
        return {"status": "crash", "reason": "CUDA graph capture failed: context-parallel ring sends are dynamic"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    if config["model.sequence_parallel"]:
        logsp += SP_GAIN
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    loss = 1.42 * (1.002 if config["model.fp8"] else 1.0)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
