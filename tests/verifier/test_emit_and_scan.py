"""The stdlib emitter (destinations, rank gating, strict JSON) and the output-line scanner."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from infrarsi.verifier import scan
from infrarsi.verifier.emit import Receipts


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_path_destination_and_strict_json(tmp_path, monkeypatch):
    p = tmp_path / "rx.jsonl"
    monkeypatch.delenv("INFRARSI_RECEIPT_FD", raising=False)
    monkeypatch.setenv("INFRARSI_RECEIPT_PATH", str(p))
    monkeypatch.setenv("RANK", "0")
    rx = Receipts.from_env()
    rx.header("md", 5, "bf16", 2, 128, 16, versions={"torch": "x"}, extra={"global_batch": 8})
    rx.update(1, float("nan"), float("inf"), 128, 8, 16, 1, 1e-3, "bd", 0.5, None, {"forward": 0.2})
    rx.footer(1, extra={"eval": 2.5})
    rx.close()
    h, u, f = _lines(p)
    assert h["kind"] == "header" and h["precision"] == "bf16" and h["extra"] == {"global_batch": 8}
    assert u["loss"] == "NaN" and u["grad_norm"] == "Infinity" and u["phases"] == {"forward": 0.2}
    assert f == {"kind": "footer", "completed": 1, "extra": {"eval": 2.5}}


def test_noop_without_destination_and_on_other_ranks(tmp_path, monkeypatch):
    monkeypatch.delenv("INFRARSI_RECEIPT_FD", raising=False)
    monkeypatch.delenv("INFRARSI_RECEIPT_PATH", raising=False)
    assert not Receipts.from_env().active
    p = tmp_path / "rx.jsonl"
    monkeypatch.setenv("INFRARSI_RECEIPT_PATH", str(p))
    monkeypatch.setenv("RANK", "1")
    rx = Receipts.from_env()
    rx.footer(3)
    assert not rx.active and not p.exists()


def test_fd_destination_and_reused_descriptor_is_not_written(tmp_path):
    r, w = os.pipe()
    code = "from infrarsi.verifier.emit import Receipts; Receipts.from_env().footer(7)"
    env = dict(os.environ, INFRARSI_RECEIPT_FD=str(w), INFRARSI_RECEIPT_INO=str(os.fstat(w).st_ino), RANK="0")
    env.pop("INFRARSI_RECEIPT_FIFO", None)
    subprocess.run([sys.executable, "-c", code], env=env, pass_fds=(w,), check=True)
    os.close(w)
    assert json.loads(os.read(r, 4096)) == {"kind": "footer", "completed": 7}
    os.close(r)
    other = tmp_path / "victim"
    with open(other, "w") as fh:      # a descriptor with another inode must not be written to
        env["INFRARSI_RECEIPT_FD"] = str(fh.fileno())
        subprocess.run([sys.executable, "-c", code], env=env, pass_fds=(fh.fileno(),), check=True)
    assert other.read_text() == ""


def test_writes_survive_a_closed_reader():
    r, w = os.pipe()
    rx = Receipts(os.fdopen(w, "w"))
    os.close(r)
    rx.footer(1)          # EPIPE is swallowed, the job keeps training
    rx.footer(2)
    assert not rx.active


@pytest.mark.parametrize("line,kind", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
    ("Traceback (most recent call last):", "traceback"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout", "nccl"),
    ("misc/socket.cc:50 NCCL WARN Net : Connection closed by remote peer", "nccl"),
    ("torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp, ncclSystemError", "nccl"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda"),
    ("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx", "cuda"),
    ("step 10 loss 2.31 tokens/s 10233", None),
    ("NCCL_NVLS_ENABLE=0", None),
])
def test_classify_line(line, kind):
    assert scan.classify_line(line) == kind


def test_parse_oom_units():
    got = scan.parse_oom("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                         "79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory")
    assert got == {"requested_gib": pytest.approx(2.0), "free_gib": pytest.approx(1.23)}
    old = scan.parse_oom("Tried to allocate 1024.00 MiB (GPU 0; 15.78 GiB total capacity; 512.00 MiB free; ...)")
    assert old == {"requested_gib": pytest.approx(1.0), "free_gib": pytest.approx(0.5)}
    assert scan.parse_oom("out of memory") == {"requested_gib": None, "free_gib": None}
