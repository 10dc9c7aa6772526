"""Outcome classification of a finished trial: the receipt first, then the
backend's state, then the job's logs -- never the backend state alone.

Also the readable failure facts read from a job's log: :func:`exception_line` (the script's own
``ValueError: bad value``, not a launcher's traceback) and :func:`oom_need` (what an out-of-memory message,
parsed by :func:`infrarsi.verifier.scan.parse_oom_detail`, says the process needed against its own cap).

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
#: slurmstepd lines that mean the job exceeded its host memory limit (--mem); ``oom-kill``/``oom_kill`` in lower
#: case only, as slurmstepd and the kernel print it, so a printed environment (``SLURM_OOM_KILL_STEP=0``) is no OOM
_HOST_OOM = re.compile(r"(?i:exceeded memory limit|Exceeded job memory limit)|oom[-_ ]kill")

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



# ------------------------------------------------------------------ readable failure facts
#: prefixes launchers put before a worker's lines: ``[rank0]: ``, ``[default0]:``, srun --label ``0: ``
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?|\d+:\s)")
_TB_START = "Traceback (most recent call last):"
#: an exception's last line: a (dotted) type name, then ``: message`` or nothing
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
#: exceptions raised by launchers about a child that failed: the child's own error is the one to report
_LAUNCHER_EXC = re.compile(r"(^|\.)(ChildFailedError|SignalException|CalledProcessError)$|^torch\.distributed\.elastic\.")
MAX_REASON_LINE = 240


def _strip_prefix(line: str) -> str:
    return _RANK_PREFIX.sub("", line.rstrip("\r"), count=1)


def _exceptions(log_text: str) -> list[str]:
    """Every traceback's final ``Type: message`` line in ``log_text``, in order (rank prefixes removed)."""
    lines = [_strip_prefix(x) for x in log_text.splitlines()]
    found: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != _TB_START:
            i += 1
            continue
        j = i + 1
        # frames are indented ("  File ...", "    code", "    ^^^^"); the first unindented line ends them
        while j < len(lines) and (not lines[j].strip() or lines[j][:1] in (" ", "\t")):
            j += 1
        if j < len(lines) and lines[j].strip() != _TB_START:
            m = _EXC_LINE.match(lines[j].strip())
            if m:
                found.append(lines[j].strip())
        i = j
    return found


def exception_line(log_text: str) -> str | None:
    """The failing script's own exception line (``ValueError: bad value``) from a job log, or None.

    The last traceback's final line wins, except that a launcher's exception about a failed child
    (torchrun's ``ChildFailedError``, ``subprocess.CalledProcessError``) gives way to the last exception
    printed before it (the worker's own).  Per-rank prefixes (``[rank0]: ``) are removed; the line is cut at
    :data:`MAX_REASON_LINE` characters."""
    excs = _exceptions(log_text)
    own = [e for e in excs if not _LAUNCHER_EXC.search(_EXC_LINE.match(e).group(1))]  # type: ignore[union-attr]
    pick = own[-1] if own else (excs[-1] if excs else None)
    if pick is None:
        return None
    return pick if len(pick) <= MAX_REASON_LINE else pick[:MAX_REASON_LINE - 3] + "..."


def last_log_line(log_text: str) -> str | None:
    """The last non-empty line of a log (prefix removed, cut to :data:`MAX_REASON_LINE`), or None."""
    for raw in reversed(log_text.splitlines()):
        line = _strip_prefix(raw).strip()
        if line:
            return line if len(line) <= MAX_REASON_LINE else line[:MAX_REASON_LINE - 3] + "..."
    return None


def oom_need(detail: dict[str, float], peak_gib: float | None = None) -> tuple[float | None, float | None, str]:
    """``(need_gib, cap_gib, cap_source)`` of an out-of-memory failure.

    ``need_gib`` is what the process would have held had the allocation succeeded plus the request: under a
    per-process cap what its allocator held (``reserved_gib``, which the cap limits), otherwise all the memory it
    had in use (``in_use_gib``, CUDA context included), else the job's last reported peak.
    ``cap_gib`` is the process's own cap when the message states one (``allowed_gib``; source ``"process"``),
    else None (the caller uses the contract's ``memory_cap_gib``).  Never the whole GPU's free memory: under a
    per-process cap the GPU may have 99 GiB free and the process still be out of memory."""
    req = detail.get("requested_gib")
    capped = "allowed_gib" in detail
    # the per-process cap limits what the allocator reserves; a device-wide limit counts everything in use
    order = ("reserved_gib", "in_use_gib") if capped else ("in_use_gib", "reserved_gib")
    held = next((detail[k] for k in order if k in detail), peak_gib)
    need = (held + req) if (held is not None and req is not None) else None
    return need, (detail["allowed_gib"] if capped else None), ("process" if capped else "")
