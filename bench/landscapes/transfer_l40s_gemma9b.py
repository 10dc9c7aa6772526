"""Transfer target/source: the Gemma-style 9B dense model (seq 8192) of ``transfer_h200_gemma9b.py`` on one 8x
L40S node (PCIe; 362 TFLOP/s dense BF16, 864 GB/s, 48 GiB), launched by a Hugging Face Trainer-style trainer
with other flag names (``fp8``, ``tp_size``, ``gradient_checkpointing``, ...).  The knobs carry the same
``mechanism`` names and ``canonical`` value maps, so experience moves between the two.

Held out for issue 13 (session 16), written and committed with its twin before either was measured.

Same fixed layout and memory model as the twin, on 48 GiB; gradient traffic crosses PCIe:

* Sign flips against the H200: comm overlap -0.02 (+0.05), the 400 MB bucket +0.04 (-0.01).
* Same sign, other size: FP8 +0.10 (+0.05), TP2 -0.07 (-0.04), TP4 -0.15 (-0.09), the 100 MB bucket +0.02.
* Kernel levers: flash attention +0.08, torch.compile +0.06, the fused optimizer +0.02, no activation
  checkpointing +0.10, micro-batch 2 +0.03 and 4 +0.04.

No checkpointing fits only from TP2, whose cost (-0.07) it outweighs.

Failures (the software's, as on the twin): FP8 without torch.compile crashes.
"""

from __future__ import annotations

import math

from infrarsi.controller.search.landscape import simulate_run

CAPACITY_GIB = 48.0
GPUS = 8
REF_STEP_S = 6.8
ENVIRONMENT = {"gpu_sku": "L40S", "gpu_mem_gib": 48.0, "peak_tflops": 362.0, "bandwidth_gbs": 864.0,
               "gpus_per_node": 8, "nodes": 1, "interconnect": "pcie", "framework": "torch",
               "model_family": "gemma", "params": 9e9, "seq_len": 8192, "parallel": "fsdp8"}

#: generic priors (the same as the twin's; they ignore the hardware)
KNOBS = [
    {"name": "fp8", "values": [False, True], "reference": False, "mechanism": "low_precision_gemm",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "tp_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "tensor_parallel", "mem_prior_gib": {2: -10.0, 4: -15.0}},
    {"name": "overlap_comm", "values": [False, True], "reference": False, "mechanism": "comm_overlap",
     "canonical": {"False": "off", "True": "on"}},
    {"name": "ddp_bucket_cap_mb", "values": [25, 100, 400], "reference": 25, "ordered": True,
     "mechanism": "grad_bucket", "canonical": {"25": "25mb", "100": "100mb", "400": "400mb"}},
    {"name": "gradient_checkpointing", "values": [True, False], "reference": True,
     "mechanism": "activation_checkpointing", "canonical": {"True": "on", "False": "off"},
     "prior_mean": {False: 0.10}, "mem_prior_gib": {False: 24.0}},
    {"name": "attn_implementation", "values": ["sdpa", "flash_attention_2"], "reference": "sdpa",
     "mechanism": "attention_kernel", "canonical": {"flash_attention_2": "flash"},
     "prior_mean": {"flash_attention_2": 0.06}},
    {"name": "torch_compile", "values": [False, True], "reference": False, "mechanism": "graph_compile",
     "canonical": {"False": "off", "True": "on"}, "prior_mean": {True: 0.05}},
    {"name": "optim", "values": ["adamw_torch", "adamw_torch_fused"], "reference": "adamw_torch",
     "mechanism": "optimizer_fusion", "canonical": {"adamw_torch": "foreach", "adamw_torch_fused": "fused"},
     "prior_mean": {"adamw_torch_fused": 0.01}},
    {"name": "per_device_train_batch_size", "values": [1, 2, 4], "reference": 1, "ordered": True,
     "mechanism": "micro_batch", "prior_mean": {2: 0.02, 4: 0.03}, "mem_prior_gib": {2: 6.0, 4: 18.0}},
    {"name": "dataloader_num_workers", "values": [2, 8], "reference": 2, "mechanism": "dataloader_workers"},
]

SPEED = {
    ("fp8", True): 0.10,
    ("tp_size", 2): -0.07, ("tp_size", 4): -0.15,
    ("overlap_comm", True): -0.02,
    ("ddp_bucket_cap_mb", 100): 0.02, ("ddp_bucket_cap_mb", 400): 0.04,
    ("gradient_checkpointing", False): 0.10,
    ("attn_implementation", "flash_attention_2"): 0.08,
    ("torch_compile", True): 0.06,
    ("optim", "adamw_torch_fused"): 0.02,
    ("per_device_train_batch_size", 2): 0.03, ("per_device_train_batch_size", 4): 0.04,
    ("dataloader_num_workers", 8): 0.005,
}


def peak_mem(c: dict) -> float:
    """Per-GPU peak memory (GiB), the same model as the H200 twin."""
    tp, mbs = int(c["tp_size"]), int(c["per_device_train_batch_size"])
    act = (4.0 if c["gradient_checkpointing"] else 32.0) / tp \
        * (0.8 if c["attn_implementation"] == "flash_attention_2" else 1.0)
    return 18.0 / tp + mbs * act + (1.2 / tp if c["fp8"] else 0.0) - (1.0 if c["torch_compile"] else 0.0) + 5.0


def evaluate(config: dict, patches: list, rng) -> dict:
    if config["fp8"] and not config["torch_compile"]:
        return {"status": "crash", "reason": "the float8 training path requires torch.compile"}
    mem = peak_mem(config)
    if mem > CAPACITY_GIB:
        return {"status": "oom", "requested_gib": mem, "capacity_gib": CAPACITY_GIB}
    logsp = sum(SPEED.get((k, v), 0.0) for k, v in config.items())
    loss = 2.31 * (1.002 if config["fp8"] else 1.0)
    mean_s, steps = simulate_run(REF_STEP_S * math.exp(-logsp), rng, run_sd=0.004, step_sd=0.01)
    return {"status": "ok", "step_time_s": mean_s, "step_times": steps, "peak_mem_gib": mem, "loss": loss}
