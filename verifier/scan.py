"""Classification of a job's output lines: CUDA/NCCL errors, tracebacks, out-of-memory.

:func:`classify_line` is pure; :func:`parse_oom` extracts the allocator's requested
and free GiB from PyTorch's "CUDA out of memory. Tried to allocate 2.00 GiB ...
of which 1.10 GiB is free" message (MiB/KiB/GiB units accepted).
"""

from __future__ import annotations

import re

_OOM = re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc", re.I)
_CUDA = re.compile(r"CUDA error|cudaError\w*|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|device-side assert|illegal memory access")
_NCCL = re.compile(r"\bNCCL\b.*\b(error|WARN|timed? ?out|failure)\b|nccl\w*Error|ProcessGroupNCCL.*(Watchdog|timeout|error)", re.I)
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B)"
_REQ = re.compile(r"Tried to allocate\s+" + _SIZE, re.I)
_FREE = re.compile(r"(?:of which|with)\s+" + _SIZE + r"\s+(?:is\s+)?free", re.I)
_FREE2 = re.compile(_SIZE + r"\s+free", re.I)
_UNIT = {"K": 2**-20, "M": 2**-10, "G": 1.0, "T": 2**10}


def _gib(amount: str, unit: str) -> float:
    return float(amount) * _UNIT[unit[0].upper()]


def classify_line(line: str) -> str | None:
    """``"oom"``, ``"cuda"``, ``"nccl"``, ``"traceback"`` or ``None`` for an ordinary line."""
    if _OOM.search(line):
        return "oom"
    if _TRACEBACK.search(line):
        return "traceback"
    if _NCCL.search(line):
        return "nccl"
    if _CUDA.search(line):
        return "cuda"
    return None


def parse_oom(line: str) -> dict[str, float | None]:
    """``{"requested_gib", "free_gib"}`` from an allocator OOM line (``None`` where absent)."""
    req = _REQ.search(line)
    free = _FREE.search(line) or _FREE2.search(line)
    return {
        "requested_gib": _gib(*req.groups()) if req else None,
        "free_gib": _gib(*free.groups()) if free else None,
    }
