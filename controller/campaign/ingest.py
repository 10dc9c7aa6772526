"""Turn a finished trial into what the store records: verified outcome, verdicts, observation and cost.

The outcome comes from the signed receipt first (signature, schema and trial binding checked before anything
is read from it), then from the executor's classification (Slurm state and job log); never from the
scheduler's state alone.  Pure apart from reading ``receipt.json`` and the tail of the job's log from the trial's
out directory.

A failed trial's reason is readable and points at its log: a crash says the script's own exception line
(``ValueError: bad value``; under torchrun the worker's, not torchrun's ``ChildFailedError``), else the exit
status and the log's last line; an out-of-memory failure says what the process needed against its own cap; every
failure ends with ``(log: <out>/job.log)``.  The OOM shortfall is measured against the process's own cap (the
"N GiB allowed" of ``torch.cuda.set_per_process_memory_fraction`` in the message, else the contract's
``memory_cap_gib``), never against the whole GPU's free memory.

Bounded: the receipt file's size is checked before it is read (never more than ``MAX_RECEIPT_BYTES + 1`` bytes
are held); an oversized receipt is stored as a small marker (:func:`~infrarsi.verifier.receipt.oversized_marker`)
and rejected at L0.  The executor's own start/end times are passed to the judge (``executor_clock``, L5).

An observation's ``step_time_s`` is THE window statistic T of :mod:`infrarsi.verifier.speed` (mean wrapper-clock
step time over the timing window, rare stragglers winsorized; what was clipped is in ``details.window_clipped``),
so ln(T_ref / T) of two observations is exactly the paired log-speedup the promotion and L5 use.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from infrarsi.controller.executors.base import LOG_NAME
from infrarsi.controller.executors.classify import exception_line, last_log_line, log_tail, oom_need
from infrarsi.verifier.scan import parse_oom_detail
from infrarsi.controller.store.records import Ingest, TrialRecord, VerdictItem
from infrarsi.verifier import speed
from infrarsi.verifier.judge import judge, window_mean_step_time, window_step_times
from infrarsi.verifier.receipt import (
    MAX_RECEIPT_BYTES, Receipt, ReceiptError, classify_outcome, load_receipt, num, oversized_marker,
    oversized_message, read_capped,
)
from infrarsi.verifier.spec import JudgeSpec, integrity_verdict
from infrarsi.verifier.trust import isolation_mode, limits_problem


def _verdict_items(verdict: Any) -> tuple[VerdictItem, ...]:
    return tuple(VerdictItem(invariant=i.name, layer=i.layer, status=i.status, required=i.required,
                             reason=i.reason) for i in verdict.items)


def peak_mem(receipt: Receipt) -> float | None:
    """Largest peak device memory any update reported (GiB), or None when none did."""
    vals = [num(u.get("peak_mem_gib")) for u in receipt.updates]
    vals = [v for v in vals if math.isfinite(v)]
    return max(vals) if vals else None


def window_loss(receipt: Receipt, window: tuple[int, int]) -> float | None:
    """Mean loss over the window's updates (None when the window is empty)."""
    s, e = window
    vals = [num(u.get("loss")) for u in receipt.updates if s <= _index(u) <= e]
    vals = [v for v in vals if math.isfinite(v)]
    return statistics.fmean(vals) if vals else None


def phases(receipt: Receipt, window: tuple[int, int]) -> dict[str, float]:
    """Mean seconds per phase (forward/backward/optimizer/data) over the window, from the job's own timers."""
    s, e = window
    acc: dict[str, list[float]] = {}
    for u in receipt.updates:
        if s <= _index(u) <= e and isinstance(u.get("phases"), dict):
            for k, v in u["phases"].items():
                if math.isfinite(num(v)):
                    acc.setdefault(str(k), []).append(num(v))
    return {k: statistics.fmean(v) for k, v in acc.items()}


def _index(u: dict[str, Any]) -> int:
    """An update's 1-based ``index`` (0 when missing or not a number: outside every window)."""
    v = num(u.get("index"))
    return int(v) if math.isfinite(v) else 0


def build_ingest(trial: TrialRecord, exec_outcome: str, exec_reason: str, start: float | None,
                 end: float | None, master_key: bytes, references: list[Receipt], spec: JudgeSpec,
                 devices: int, capacity_gib: float | None,
                 max_receipt_bytes: int = MAX_RECEIPT_BYTES, on_gpu: bool = True) -> tuple[Ingest, Receipt | None]:
    """Verify and summarise one finished trial.

    ``references`` are the campaign's accepted reference receipts (empty while judging the references
    themselves, which are checked for completion only).  ``start``/``end`` are the executor's own unix times
    for the run (None when unknown); they bound the receipt's claimed timeline (``executor_clock``).
    ``devices`` counts GPUs (at least 1: a CPU trial occupies one slot) for the cost ledger: GPU-seconds when
    ``on_gpu``, else CPU-seconds (a CPU trial is never booked as GPU time).
    A receipt over ``max_receipt_bytes`` is never read into memory: the outcome is ``rejected`` at L0
    (``oversized: N bytes > cap C``) and a marker is stored in its place.  A receipt over the wrapper's limits
    (dropped lines, far too many updates, disk limit) is ``rejected`` at L1 whatever the job's exit status.
    """
    out = Path(trial.outdir)
    raw_path = out / "receipt.json"
    wall = (end - start) if (start is not None and end is not None and end >= start) else 0.0
    base: dict[str, Any] = {"start_time": start, "end_time": end}
    raw: bytes | None = None
    if raw_path.is_file():
        try:
            raw, size = read_capped(raw_path, max_receipt_bytes)
        except ReceiptError as exc:
            return Ingest(outcome=exec_outcome if exec_outcome != "ok" else "crash", reason=str(exc),
                          receipt_raw=None, signature_ok=False, **_booked(wall, devices, on_gpu), **base), None
        if raw is None:
            msg = oversized_message(size, max_receipt_bytes)
            v = integrity_verdict(msg)
            return Ingest(outcome="rejected", reason=f"L0 signature: {msg}",
                          receipt_raw=oversized_marker(size, max_receipt_bytes), signature_ok=False,
                          verdicts=_verdict_items(v), first_failed_layer="L0", **_booked(wall, devices, on_gpu),
                          details={"receipt_bytes": size}, **base), None
    if raw is None:
        outcome0 = exec_outcome if exec_outcome != "ok" else "crash"
        reason = failure_reason(out, outcome0, exec_reason or "the job produced no receipt")
        return Ingest(outcome=outcome0, reason=reason, receipt_raw=None,
                      signature_ok=False, **_booked(wall, devices, on_gpu), **base), None
    try:
        receipt = load_receipt(raw, master_key, trial.trial_key, max_bytes=max_receipt_bytes)
    except ReceiptError as exc:
        v = integrity_verdict(str(exc))
        return Ingest(outcome="rejected", reason=f"L0 signature: {exc}", receipt_raw=raw, signature_ok=False,
                      verdicts=_verdict_items(v), first_failed_layer="L0", **_booked(wall, devices, on_gpu), **base), None
    if not wall:
        w_s = num(receipt.wrapper.get("wall_s"))
        wall = w_s if math.isfinite(w_s) and w_s > 0 else 0.0
    booked = _booked(wall, devices, on_gpu)
    window = (start, end)
    outcome = classify_outcome(receipt)
    if exec_outcome == "cancelled":
        outcome = "cancelled"
    iso = receipt.wrapper.get("isolation")
    details: dict[str, Any] = {"signature": receipt.signature, "phases": phases(receipt, spec.window),
                               "header_extra": (receipt.header or {}).get("extra") or {},
                               "isolation": {"mode": isolation_mode(receipt),
                                             "detail": str(iso.get("detail", ""))[:300] if isinstance(iso, dict)
                                             else ""},
                               "limits": receipt.wrapper.get("limits") if isinstance(receipt.wrapper.get("limits"),
                                                                                     dict) else None}
    peak = peak_mem(receipt)
    if outcome != "cancelled" and limits_problem(receipt, spec) is not None:
        verdict = judge(receipt, references, spec, executor_window=window)
        first = verdict.first_failed
        return Ingest(outcome="rejected", reason=f"{first.layer} {first.name}: {first.reason}" if first else
                      "over its limits", receipt_raw=raw, signature_ok=True, verdicts=_verdict_items(verdict),
                      peak_mem_gib=peak, accepted=False, first_failed_layer=verdict.first_failed_layer or "L1",
                      details=details, **booked, **base), receipt
    if outcome == "oom":
        shortfall, reason, details["oom"] = oom_facts(receipt, out, peak, capacity_gib)
        return Ingest(outcome="oom", reason=reason, receipt_raw=raw,
                      signature_ok=True, censor_kind="oom", oom_shortfall_gib=shortfall, peak_mem_gib=peak,
                      details=details, **booked, **base), receipt
    if outcome != "ok":
        errs = [e for e in receipt.wrapper.get("errors") or [] if isinstance(e, dict) and e.get("kind") != "traceback"]
        fallback = (str(errs[0].get("line", ""))[:300] if errs else "") or exec_reason or \
            f"exit code {receipt.wrapper.get('exit_code')}"
        reason = failure_reason(out, outcome, fallback)
        return Ingest(outcome=outcome, reason=reason, receipt_raw=raw, signature_ok=True, peak_mem_gib=peak,
                      details=details, **booked, **base), receipt
    times = window_step_times(receipt, spec.window)
    step = window_mean_step_time(receipt, spec.window)  # THE window statistic T (infrarsi.verifier.speed)
    details["window_step_times"] = times
    try:
        summ = speed.window_summary(times)
        details["window_clipped"] = {"steps": summ.clipped, "seconds": summ.clipped_s}
    except speed.SpeedError:
        pass
    loss = window_loss(receipt, spec.window)
    kind = "near_cap" if peak is not None and capacity_gib and peak > 0.97 * capacity_gib else "exact"
    if trial.stage == "reference" or not references:
        return Ingest(outcome="ok", reason="reference run completed", receipt_raw=raw, signature_ok=True,
                      step_time_s=step, peak_mem_gib=peak, censor_kind=kind, loss_window_mean=loss, accepted=True,
                      details=details, **booked, **base), receipt
    verdict = judge(receipt, references, spec, executor_window=window)
    first = verdict.first_failed
    return Ingest(
        outcome="ok" if verdict.accepted else "rejected",
        reason="accepted" if first is None else f"{first.layer} {first.name}: {first.reason}",
        receipt_raw=raw, signature_ok=True, verdicts=_verdict_items(verdict), step_time_s=step, peak_mem_gib=peak,
        censor_kind=kind, loss_window_mean=loss, accepted=verdict.accepted,
        first_failed_layer=verdict.first_failed_layer, details=details, **booked, **base,
    ), receipt


def _booked(wall: float, devices: int, on_gpu: bool) -> dict[str, float]:
    """The cost-ledger seconds of a run of ``wall`` seconds on ``devices`` GPUs (or CPU slots)."""
    secs = wall * devices
    return {"gpu_seconds": secs, "cpu_seconds": 0.0} if on_gpu else {"gpu_seconds": 0.0, "cpu_seconds": secs}


def _first_error(receipt: Receipt, kind: str | None = None) -> str:
    """The first error line the wrapper recorded (of ``kind`` when given), cut to 300 characters."""
    errs = [e for e in receipt.wrapper.get("errors") or [] if isinstance(e, dict)
            and (kind is None or e.get("kind") == kind)]
    return str(errs[0].get("line", ""))[:300] if errs else ""


def log_path(out: Path) -> Path | None:
    """The job's log in ``out`` (the wrapper's ``job.log``, else a Slurm ``slurm-<job>.out``), or None."""
    if (out / LOG_NAME).is_file():
        return out / LOG_NAME
    slurm = sorted(out.glob("slurm-*.out"))
    return slurm[-1] if slurm else None


def _log_text(out: Path) -> str:
    return log_tail([*sorted(out.glob("slurm-*.out")), out / LOG_NAME])


def _with_log(reason: str, out: Path) -> str:
    path = log_path(out)
    return f"{reason} (log: {path})" if path is not None else reason


def failure_reason(out: Path, outcome: str, fallback: str) -> str:
    """One readable line for a failed (crash/timeout) trial: the script's own exception line when its log has
    one (a crash), else ``fallback`` (the executor's or receipt's reason) with the log's last line; then the
    log's path.  Cancelled trials keep ``fallback``."""
    if outcome == "cancelled":
        return fallback
    text = _log_text(out)
    exc = exception_line(text) if outcome == "crash" else None
    if exc:
        reason = exc
    else:
        last = last_log_line(text)
        reason = f"{fallback}; last log line: {last}" if last and last not in fallback and fallback not in last \
            else fallback
    return _with_log(reason, out)


def oom_facts(receipt: Receipt, out: Path, peak: float | None,
              capacity_gib: float | None) -> tuple[float, str, dict[str, Any]]:
    """``(shortfall_gib, reason, facts)`` of an out-of-memory trial.

    The allocator's message (the job log's last out-of-memory line, else the wrapper's recorded one) gives the
    request, what the process held and its own cap (``N GiB allowed``); the cap is that, else ``capacity_gib``
    (the contract's ``memory_cap_gib``).  ``shortfall = max(0, held + requested - cap)``; 0.0 when the message
    does not say enough (the memory model then learns only "more than the cap")."""
    text = _log_text(out)
    oom_lines = [ln for ln in text.splitlines() if "out of memory" in ln.lower() or "OutOfMemoryError" in ln]
    line = oom_lines[-1] if oom_lines else _first_error(receipt, "oom")
    detail = parse_oom_detail(line)
    w = receipt.wrapper.get("oom") if isinstance(receipt.wrapper.get("oom"), dict) else {}
    if "requested_gib" not in detail and isinstance(num(w.get("requested_gib")), float) \
            and math.isfinite(num(w.get("requested_gib"))):
        detail["requested_gib"] = num(w.get("requested_gib"))
    need, cap, source = oom_need(detail, peak)
    if cap is None and capacity_gib:
        cap, source = float(capacity_gib), "contract memory_cap_gib"
    elif source == "process":
        source = "the process's own cap"
    shortfall = max(0.0, need - cap) if (need is not None and cap is not None) else 0.0
    facts: dict[str, Any] = {**{k: round(v, 4) for k, v in detail.items()}, "need_gib": need, "cap_gib": cap,
                             "cap_source": source or None, "shortfall_gib": shortfall}
    req = detail.get("requested_gib")
    if need is not None and cap is not None:
        reason = (f"out of memory: needed {need:.2f} GiB (held {need - (req or 0.0):.2f} + requested "
                  f"{req or 0.0:.2f}) against {source} of {cap:.2f} GiB, short by {shortfall:.2f} GiB")
    elif req is not None:
        reason = f"out of memory: tried to allocate {req:.2f} GiB" + (f" (cap {cap:.2f} GiB, {source})" if cap else "")
    else:
        exc = exception_line(text)
        reason = f"out of memory: {exc}" if exc else "out of memory"
    return shortfall, _with_log(reason, out), facts
