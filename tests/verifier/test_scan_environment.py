"""Error scanning matches error lines, never variable names or echoed configuration (issue 16, item 9).

A training script that prints its environment (what torchrun, NCCL and Slurm set: ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``,
``NCCL_*``, ``SLURM_*``, ``CUDA_*``) or a JSON config line holding those names must pass L1 ``no_errors``; real error
lines (a traceback, ``RuntimeError: NCCL error ...``, ``CUDA out of memory``) are still caught.  The end-to-end cases run
the script under real ``torchrun`` inside the exec wrapper, so the environment printed is the one torchrun really sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infrarsi.verifier import invariants, scan
from infrarsi.verifier.receipt import Receipt
from infrarsi.verifier.spec import JudgeSpec

#: what NCCL, CUDA and Slurm users commonly set, added to the job's environment by the tests (torchrun adds its own)
SITE_ENV = {
    "NCCL_DEBUG": "WARN", "NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_IB_TIMEOUT": "22", "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_BLOCKING_WAIT": "0", "TORCH_NCCL_BLOCKING_WAIT": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "CUDA_LAUNCH_BLOCKING": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0",
    "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "infrarsi-trial", "SLURM_OOM_KILL_STEP": "0",
}

ORDINARY = [
    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
    "export NCCL_ASYNC_ERROR_HANDLING=1",
    "NCCL_DEBUG=WARN",
    "NCCL_IB_TIMEOUT=22",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    'config: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN", "lr": 0.0003}',
    "{'torch_nccl_async_error_handling': '1', 'nccl_timeout': 600}",
    "Namespace(nccl_async_error_handling=True, nccl_timeout_s=600, oom_retry=False)",
    "env: ['TORCH_NCCL_ASYNC_ERROR_HANDLING', 'NCCL_DEBUG', 'CUDA_VISIBLE_DEVICES']",
    "nccl_async_error_handling: 1",
    "vm:123:456 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    "vm:123:456 [0] NCCL INFO comm 0x55 rank 0 nranks 2 - Init COMPLETE",
    "[W ProcessGroupNCCL.cpp:1234] Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated; use "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING instead (function getCvarInt)",
    "step 10 loss 2.31 tokens/s 10233",
]

ERRORS = [
    ("Traceback (most recent call last):", "traceback"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5", "nccl"),
    ("RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5", "nccl"),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.", "nccl"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.", "nccl"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. If reserved but unallocated memory is "
     "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "oom"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb)`", "cuda"),
    ("triton.runtime.errors: CUDA_ERROR_ILLEGAL_ADDRESS", "cuda"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "oom"),
]


@pytest.mark.parametrize("line", ORDINARY)
def test_environment_and_config_lines_are_ordinary(line):
    assert scan.classify_line(line) is None


@pytest.mark.parametrize("line,kind", ERRORS)
def test_error_lines_are_still_errors(line, kind):
    assert scan.classify_line(line) == kind


SCRIPT = """
import json, os, sys, torch
import torch.distributed as dist
from infrarsi.verifier.adapters.ddp import DDPReceiptLogger
dist.init_process_group("gloo")
for k, v in sorted(os.environ.items()):      # what torchrun, NCCL and Slurm set, as many scripts print it
    print(f"{k}={v}", flush=True)
print(json.dumps({"config": dict(os.environ), "lr": 3e-4}), flush=True)
print({k: v for k, v in os.environ.items() if k.startswith(("TORCH", "NCCL", "CUDA", "SLURM"))}, flush=True)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
net = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
rl = DDPReceiptLogger(net, opt, seq_len=4)
g = torch.Generator().manual_seed(1)
for i in range(4):
    x = torch.randn(8, 4, generator=g).chunk(dist.get_world_size())[dist.get_rank()]
    rl.begin(x)
    loss = net(x).pow(2).mean(); loss.backward()
    rl.grads(); opt.step(); opt.zero_grad(); rl.end(loss)
rl.finish()
if len(sys.argv) > 1:          # the error message comes as an argument, so the environment dump does not hold it
    raise RuntimeError(" ".join(sys.argv[1:]))
dist.destroy_process_group()
"""


def _run_torchrun(tmp_path: Path, fail_with: str | None = None) -> tuple[dict, str]:
    """``SCRIPT`` under ``infrarsi exec`` + real torchrun (2 gloo ranks): (receipt dict, job.log text)."""
    script = tmp_path / "train_env.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", **SITE_ENV)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "INFRARSI_RECEIPT_PATH", "INFRARSI_RECEIPT_FD"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "infrarsi.verifier.exec", "--out", str(out), "--quiet", "--cwd", str(tmp_path),
           "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2",
           str(script), *([fail_with] if fail_with else [])]
    for _attempt in (1, 2):  # torchrun's --standalone rendezvous on a loaded 2-core box can fail to start: retry once
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        receipt = json.loads((out / "receipt.json").read_text())
        if len(receipt["updates"]) == 4 and (fail_with or proc.returncode == 0):
            break
    return receipt, (out / "job.log").read_text()


def _no_errors(receipt: dict):
    return invariants.no_errors(Receipt.from_dict(receipt), [], JudgeSpec(updates=4, window=(1, 4)))


def test_a_script_printing_torchruns_environment_passes_no_errors(tmp_path):
    receipt, log = _run_torchrun(tmp_path)
    assert receipt["wrapper"]["exit_code"] == 0, log[-2000:]
    # the log really holds what torchrun set, as assignments and inside the JSON config line
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in log and "TORCHELASTIC_RUN_ID=" in log
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"' in log and "SLURM_OOM_KILL_STEP=0" in log
    assert receipt["wrapper"]["errors"] == []
    item = _no_errors(receipt)
    assert item.status == "pass", item.reason


def test_a_real_error_after_the_environment_dump_is_still_rejected(tmp_path):
    receipt, log = _run_torchrun(tmp_path, fail_with="NCCL error: unhandled system error, NCCL version 2.21.5")
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in log
    kinds = {e["kind"] for e in receipt["wrapper"]["errors"]}
    assert "traceback" in kinds and "nccl" in kinds
    assert not any("ASYNC_ERROR_HANDLING" in e["line"] for e in receipt["wrapper"]["errors"])
    item = _no_errors(receipt)
    assert item.status == "fail" and "line" in item.reason


def test_a_crash_whose_log_prints_slurms_environment_is_not_a_host_oom():
    """The executor's log check (controller/executors/classify.py) reads slurmstepd's lower-case ``oom_kill``, not
    ``SLURM_OOM_KILL_STEP`` in a printed environment."""
    from infrarsi.controller.executors.classify import classify

    receipt = {"wrapper": {"exit_code": 1, "signal": None, "timed_out": False, "oom": None,
                           "errors": [{"kind": "traceback", "line": "Traceback (most recent call last):"}]}}
    env_dump = "\n".join(f"{k}={v}" for k, v in SITE_ENV.items()) + "\nValueError: bad config\n"
    assert classify(receipt, "FAILED", 1, None, env_dump).outcome == "crash"
    stepd = env_dump + "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.batch.\n"
    assert classify(receipt, "FAILED", 1, None, stepd).outcome == "oom"
