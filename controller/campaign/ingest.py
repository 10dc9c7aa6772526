"""Turn a finished trial into what the store records: verified outcome, verdicts, observation and cost.

The outcome comes from the signed receipt first (signature, schema and trial binding checked before anything
is read from it), then from the executor's classification (Slurm state and job log); never from the
scheduler's state alone.  Pure apart from reading ``receipt.json`` from the trial's out directory.

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
                 devices: int, capacity_gib: float,
                 max_receipt_bytes: int = MAX_RECEIPT_BYTES) -> tuple[Ingest, Receipt | None]:
    """Verify and summarise one finished trial.

    ``references`` are the campaign's accepted reference receipts (empty while judging the references
    themselves, which are checked for completion only).  ``start``/``end`` are the executor's own unix times
    for the run (None when unknown); they bound the receipt's claimed timeline (``executor_clock``).
    ``devices`` counts GPUs (at least 1: a CPU trial occupies one slot) for the GPU-seconds in the cost ledger.
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
                          receipt_raw=None, signature_ok=False, gpu_seconds=wall * devices, **base), None
        if raw is None:
            msg = oversized_message(size, max_receipt_bytes)
            v = integrity_verdict(msg)
            return Ingest(outcome="rejected", reason=f"L0 signature: {msg}",
                          receipt_raw=oversized_marker(size, max_receipt_bytes), signature_ok=False,
                          verdicts=_verdict_items(v), first_failed_layer="L0", gpu_seconds=wall * devices,
                          details={"receipt_bytes": size}, **base), None
    if raw is None:
        reason = exec_reason or "the job produced no receipt"
        return Ingest(outcome=exec_outcome if exec_outcome != "ok" else "crash", reason=reason, receipt_raw=None,
                      signature_ok=False, gpu_seconds=wall * devices, **base), None
    try:
        receipt = load_receipt(raw, master_key, trial.trial_key, max_bytes=max_receipt_bytes)
    except ReceiptError as exc:
        v = integrity_verdict(str(exc))
        return Ingest(outcome="rejected", reason=f"L0 signature: {exc}", receipt_raw=raw, signature_ok=False,
                      verdicts=_verdict_items(v), first_failed_layer="L0", gpu_seconds=wall * devices, **base), None
    if not wall:
        w_s = num(receipt.wrapper.get("wall_s"))
        wall = w_s if math.isfinite(w_s) and w_s > 0 else 0.0
    gpu_seconds = wall * devices
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
                      details=details, gpu_seconds=gpu_seconds, **base), receipt
    if outcome == "oom":
        oom = receipt.wrapper.get("oom") or {}
        req, free = oom.get("requested_gib"), oom.get("free_gib")
        shortfall = max(0.0, float(req) - float(free or 0.0)) if req is not None else 0.0
        return Ingest(outcome="oom", reason=_first_error(receipt) or "out of memory", receipt_raw=raw,
                      signature_ok=True, censor_kind="oom", oom_shortfall_gib=shortfall, peak_mem_gib=peak,
                      details=details, gpu_seconds=gpu_seconds, **base), receipt
    if outcome != "ok":
        reason = _first_error(receipt) or exec_reason or f"exit code {receipt.wrapper.get('exit_code')}"
        return Ingest(outcome=outcome, reason=reason, receipt_raw=raw, signature_ok=True, peak_mem_gib=peak,
                      details=details, gpu_seconds=gpu_seconds, **base), receipt
    times = window_step_times(receipt, spec.window)
    step = window_mean_step_time(receipt, spec.window)  # THE window statistic T (infrarsi.verifier.speed)
    details["window_step_times"] = times
    try:
        summ = speed.window_summary(times)
        details["window_clipped"] = {"steps": summ.clipped, "seconds": summ.clipped_s}
    except speed.SpeedError:
        pass
    loss = window_loss(receipt, spec.window)
    kind = "near_cap" if peak is not None and peak > 0.97 * capacity_gib else "exact"
    if trial.stage == "reference" or not references:
        return Ingest(outcome="ok", reason="reference run completed", receipt_raw=raw, signature_ok=True,
                      step_time_s=step, peak_mem_gib=peak, censor_kind=kind, loss_window_mean=loss, accepted=True,
                      details=details, gpu_seconds=gpu_seconds, **base), receipt
    verdict = judge(receipt, references, spec, executor_window=window)
    first = verdict.first_failed
    return Ingest(
        outcome="ok" if verdict.accepted else "rejected",
        reason="accepted" if first is None else f"{first.layer} {first.name}: {first.reason}",
        receipt_raw=raw, signature_ok=True, verdicts=_verdict_items(verdict), step_time_s=step, peak_mem_gib=peak,
        censor_kind=kind, loss_window_mean=loss, accepted=verdict.accepted,
        first_failed_layer=verdict.first_failed_layer, details=details, gpu_seconds=gpu_seconds, **base,
    ), receipt


def _first_error(receipt: Receipt) -> str:
    errs = receipt.wrapper.get("errors") or []
    return str(errs[0].get("line", ""))[:300] if errs else ""
