"""Outcome classification of a finished trial: the receipt first, then the
backend's state, then the job's logs -- never the backend state alone.

The receipt is read as *unverified* JSON (executors do not hold the master
key); the campaign engine verifies the signature later.  Shape used (written
by ``infrarsi.verifier.exec``): ``{"wrapper": {"exit_code", "signal", "timed_out",
"oom": null | {...}, "errors": [{"kind", "line"}, ...]}, ...}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from infrarsi.verifier.receipt import wrapper_outcome

#: log lines that mean the job ran out of *device* memory
_CUDA_OOM = re.compile(r"torch\.OutOfMemoryError|CUDA out of memory|torch\.cuda\.OutOfMemoryError")
#: slurmstepd lines that mean the job exceeded its host memory limit (--mem)
_HOST_OOM = re.compile(r"exceeded memory limit|Exceeded job memory limit|oom[-_ ]kill", re.IGNORECASE)

_TAIL_BYTES = 256 * 1024
RECEIPT_HINT = "receipt.json"
#: a receipt larger than this is not read (the wrapper caps updates at N + 16 lines of <= 64 KiB each)
MAX_RECEIPT_BYTES = 256 << 20
#: the one-line refusal the exec wrapper prints (bad input, or no sandbox: fail closed)
_WRAPPER_ERROR = re.compile(r"^infrarsi: error: .*$", re.MULTILINE)


@dataclass(frozen=True)
class Classification:
    """``outcome`` in ok|oom|crash|timeout|cancelled plus a one-line reason."""

    outcome: str
    reason: str
    exit_code: int | None = None
    signal: int | None = None


def read_receipt(path: Path, max_bytes: int = MAX_RECEIPT_BYTES) -> dict[str, Any] | None:
    """The receipt as a dict, or None when absent, larger than ``max_bytes`` (checked with ``stat`` before
    reading anything) or not a JSON object (unverified)."""
    try:
        if path.stat().st_size > max_bytes:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def wrapper_error(log_text: str) -> str | None:
    """The exec wrapper's last ``infrarsi: error: ...`` line in ``log_text`` (e.g. the fail-closed refusal
    when bubblewrap is unavailable), or None."""
    found = _WRAPPER_ERROR.findall(log_text)
    return found[-1].strip() if found else None


def log_tail(paths: Iterable[Path | None]) -> str:
    """The last ~256 KiB of each existing log, concatenated (for pattern checks)."""
    chunks: list[str] = []
    for p in paths:
        if p is None:
            continue
        try:
            with open(p, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - _TAIL_BYTES))
                chunks.append(fh.read().decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(chunks)


def _int_or_none(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def classify(
    receipt: dict[str, Any] | None,
    backend_state: str | None,
    exit_code: int | None,
    signal: int | None,
    log_text: str,
    cancel_reason: str | None = None,
) -> Classification:
    """Classify a finished trial.

    ``backend_state`` is the Slurm state (``COMPLETED``, ``CANCELLED``, ...) or a
    local pseudo-state (``EXITED``, ``CANCELLED``, ``VANISHED``); ``exit_code`` /
    ``signal`` are the backend's view; ``cancel_reason`` is set when the executor
    itself cancelled the job (user cancel or pending deadline).
    Order: the receipt's wrapper section through the verifier's one precedence
    (:func:`infrarsi.verifier.receipt.wrapper_outcome`: oom, timeout, crash, ok);
    when it says crash (or there is no receipt), the backend state (cancelled,
    timeout, host oom), then the log (CUDA/host OOM); otherwise crash, with a
    reason naming what was seen.  Completion (the footer) is judged at
    ingestion by :func:`infrarsi.verifier.receipt.classify_outcome`, on the
    verified receipt.
    """
    state = (backend_state or "").upper().split(" ")[0]
    if receipt is not None:
        w = receipt.get("wrapper") if isinstance(receipt.get("wrapper"), dict) else {}
        rc = _int_or_none(w.get("exit_code"))
        sig = _int_or_none(w.get("signal"))
        outcome, reason = wrapper_outcome(w)
        if outcome != "crash":
            return Classification(outcome, reason, rc, sig)
        # non-zero or signalled: let the backend say why it was stopped
        if cancel_reason or state == "CANCELLED":
            return Classification("cancelled", cancel_reason or "Slurm state CANCELLED", rc, sig)
        if state in ("TIMEOUT", "DEADLINE"):
            return Classification("timeout", f"Slurm state {state}", rc, sig)
        if state == "OUT_OF_MEMORY" or _HOST_OOM.search(log_text):
            return Classification("oom", "host memory limit exceeded (Slurm/log)", rc, sig)
        if _CUDA_OOM.search(log_text):
            return Classification("oom", "log: CUDA out of memory", rc, sig)
        return Classification("crash", reason, rc, sig)

    # no receipt: the wrapper never finished writing it (or refused to start the job)
    refused = wrapper_error(log_text)
    if refused and not cancel_reason:
        return Classification("crash", f"no receipt: the wrapper refused to start the job: {refused}", exit_code, signal)
    if cancel_reason or state == "CANCELLED":
        return Classification("cancelled", cancel_reason or "Slurm state CANCELLED (no receipt)", exit_code, signal)
    if state in ("TIMEOUT", "DEADLINE"):
        return Classification("timeout", f"Slurm state {state} (no receipt)", exit_code, signal)
    if state == "OUT_OF_MEMORY" or _HOST_OOM.search(log_text):
        return Classification("oom", f"host memory limit exceeded (state {state or '?'}, no receipt)", exit_code, signal)
    if _CUDA_OOM.search(log_text):
        return Classification("oom", "log: CUDA out of memory (no receipt)", exit_code, signal)
    code = f"exit {exit_code}" + (f" signal {signal}" if signal else "") if exit_code is not None or signal else "exit unknown"
    return Classification("crash", f"no receipt: the wrapper never wrote {RECEIPT_HINT} (state {state or '?'}, {code})", exit_code, signal)

