"""Classification of a job's output lines: CUDA/NCCL errors, tracebacks, out-of-memory.

Error *lines* are matched, never variable names or echoed configuration: before the patterns run,
:func:`error_text` blanks ``NAME=value`` assignments, quoted mapping keys (``"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"``)
and identifiers containing an underscore (``NCCL_ASYNC_ERROR_HANDLING``, ``nccl_timeout``), except the error codes
CUDA libraries print (``CUBLAS_STATUS_*``, ``CUDNN_STATUS_*``, ``CUDA_ERROR_*``, ``std::bad_alloc``).  NCCL's own
``NCCL INFO`` lines are informational.  So a script that prints its environment (what torchrun, NCCL and Slurm set)
or a JSON config line is not an error, while ``RuntimeError: NCCL error ...`` or ``CUDA out of memory`` still is.

:func:`classify_line` is pure; :func:`parse_oom` extracts the allocator's requested
and free GiB from PyTorch's "CUDA out of memory. Tried to allocate 2.00 GiB ...
of which 1.10 GiB is free" message (MiB/KiB/GiB units accepted) for the wrapper;
:func:`parse_oom_detail` reads every fact the message states (the per-process cap,
what the process held) for the controller's shortfall.
"""

from __future__ import annotations

import re

_OOM = re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc", re.I)
_CUDA = re.compile(r"CUDA error|cudaError\w*|CUDA_ERROR_\w+|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|device-side assert|illegal memory access")
_NCCL = re.compile(r"\bNCCL\b.*\b(error|WARN|timed? ?out|failure)\b|nccl\w*Error|ProcessGroupNCCL.*(Watchdog|timeout|error)", re.I)
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
#: ``NAME=value`` (env dumps, ``key=value`` logs; ``export`` optional), the value up to whitespace or quoted
_ASSIGN = re.compile(r"(?<![\w.-])(?:export\s+)?[A-Za-z_][A-Za-z0-9_.]*=(?:'[^']*'|\"[^\"]*\"|\S*)")
#: a quoted key of a JSON object / Python dict / YAML flow mapping: ``"name":`` or ``'name':``
_QUOTED_KEY = re.compile(r"\"(?:[^\"\\]|\\.)*\"\s*:|'(?:[^'\\]|\\.)*'\s*:")
#: identifiers with an underscore (environment variables, config keys, Python names) ...
_UNDERSCORED = re.compile(r"\b[A-Za-z0-9]*_\w*")
#: ... except the error codes CUDA libraries and C++ print
_ERROR_CODE = re.compile(r"^(?:(?:CUBLAS|CUDNN|CUSPARSE|CUFFT|CURAND|CUSOLVER|NVRTC|NVJPEG)_STATUS_\w+|CUDA_ERROR_\w+"
                         r"|bad_alloc)$")
#: NCCL's informational output (NCCL_DEBUG=INFO): never an error, whatever setting it names
_NCCL_INFO = re.compile(r"\bNCCL INFO\b")
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B)"
_REQ = re.compile(r"Tried to allocate\s+" + _SIZE, re.I)
_FREE = re.compile(r"(?:of which|with)\s+" + _SIZE + r"\s+(?:is\s+)?free", re.I)
_FREE2 = re.compile(_SIZE + r"\s+free", re.I)
_UNIT = {"K": 2**-20, "M": 2**-10, "G": 1.0, "T": 2**10, "B": 2**-30}  # B: "bytes"


def _gib(amount: str, unit: str) -> float:
    return float(amount) * _UNIT[unit[0].upper()]


def _keep_code(m: re.Match[str]) -> str:
    word = m.group(0)
    return word if _ERROR_CODE.match(word) else " "


def error_text(line: str) -> str:
    """``line`` with what cannot be an error report blanked: assignments, quoted keys, underscored names.

    The result is only for pattern matching (error lines keep their wording: ``RuntimeError: NCCL error in: ...,
    unhandled system error (run with NCCL_DEBUG=INFO for details)`` still reads ``NCCL error``)."""
    text = _ASSIGN.sub(" ", line)
    text = _QUOTED_KEY.sub(" ", text)
    return _UNDERSCORED.sub(_keep_code, text)


def classify_line(line: str) -> str | None:
    """``"oom"``, ``"cuda"``, ``"nccl"``, ``"traceback"`` or ``None`` for an ordinary line.

    Matched on :func:`error_text` of the line, so environment dumps and echoed configuration are ordinary."""
    if _NCCL_INFO.search(line):
        return None
    text = error_text(line)
    if _OOM.search(text):
        return "oom"
    if _TRACEBACK.search(line):
        return "traceback"
    if _NCCL.search(text):
        return "nccl"
    if _CUDA.search(text):
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


#: a size with its unit, bytes included (PyTorch prints "0 bytes is free" on a full device)
_SIZE_OR_BYTES = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|bytes)"
_OOM_FIELDS: dict[str, re.Pattern[str]] = {
    "requested_gib": re.compile(r"Tried to allocate\s+" + _SIZE_OR_BYTES, re.I),
    "allowed_gib": re.compile(_SIZE_OR_BYTES + r"\s+allowed", re.I),
    "in_use_gib": re.compile(r"this process has\s+" + _SIZE_OR_BYTES + r"\s+memory in use|" + _SIZE_OR_BYTES
                             + r"\s+already allocated", re.I),
    "reserved_gib": re.compile(_SIZE_OR_BYTES + r"\s+reserved in total by PyTorch", re.I),
    "allocated_gib": re.compile(r"Of the allocated memory\s+" + _SIZE_OR_BYTES + r"\s+is allocated by PyTorch", re.I),
    "unallocated_gib": re.compile(_SIZE_OR_BYTES + r"\s+is reserved by PyTorch but unallocated", re.I),
    "free_gib": re.compile(r"(?:of which|;)\s*" + _SIZE_OR_BYTES + r"\s+(?:is\s+)?free", re.I),
    "total_gib": re.compile(r"total capacity of\s+" + _SIZE_OR_BYTES + r"|" + _SIZE_OR_BYTES + r"\s+total capacity",
                            re.I),
}


def parse_oom_detail(line: str) -> dict[str, float]:
    """What a PyTorch CUDA out-of-memory message states, in GiB: ``requested_gib``, ``allowed_gib`` (the
    per-process cap of ``torch.cuda.set_per_process_memory_fraction``: ``"40.00 GiB allowed"``),
    ``in_use_gib`` (the process's memory in use), ``reserved_gib`` (held by PyTorch's allocator, which is what
    the per-process cap limits), ``free_gib`` and ``total_gib`` (the whole GPU).  Absent facts are left out."""
    out: dict[str, float] = {}
    for key, pat in _OOM_FIELDS.items():
        m = pat.search(line)
        if m:
            amount, unit = [g for g in m.groups() if g is not None][:2]
            out[key] = _gib(amount, unit)
    if "reserved_gib" not in out and "allocated_gib" in out:
        out["reserved_gib"] = out["allocated_gib"] + out.get("unallocated_gib", 0.0)
    out.pop("allocated_gib", None)
    out.pop("unallocated_gib", None)
    return out
