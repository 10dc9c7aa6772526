"""Turn a finished trial into what the store records: verified outcome, verdicts, observation and cost.

The outcome comes from the signed receipt first (signature, schema and trial binding checked before anything
is read from it), then from the executor's classification (Slurm state and job log); never from the
scheduler's state alone.  Pure apart from reading ``receipt.json`` from the trial's out directory.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from infrarsi.controller.store.records import Ingest, TrialRecord, VerdictItem
from infrarsi.verifier.judge import judge, window_mean_step_time, window_step_times
from infrarsi.verifier.receipt import Receipt, ReceiptError, classify_outcome, load_receipt
from infrarsi.verifier.spec import JudgeSpec, integrity_verdict


def _verdict_items(verdict: Any) -> tuple[VerdictItem, ...]:
    return tuple(VerdictItem(invariant=i.name, layer=i.layer, status=i.status, required=i.required,
                             reason=i.reason) for i in verdict.items)


def peak_mem(receipt: Receipt) -> float | None:
    """Largest peak device memory any update reported (GiB), or None when none did."""
    vals = [float(u["peak_mem_gib"]) for u in receipt.updates if u.get("peak_mem_gib") is not None]
    return max(vals) if vals else None


def window_loss(receipt: Receipt, window: tuple[int, int]) -> float | None:
    """Mean loss over the window's updates (None when the window is empty)."""
    s, e = window
    vals = [float(u["loss"]) for u in receipt.updates if s <= int(u.get("index", 0)) <= e and u.get("loss") is not None]
    return statistics.fmean(vals) if vals else None


def phases(receipt: Receipt, window: tuple[int, int]) -> dict[str, float]:
    """Mean seconds per phase (forward/backward/optimizer/data) over the window, from the job's own timers."""
    s, e = window
    acc: dict[str, list[float]] = {}
    for u in receipt.updates:
        if s <= int(u.get("index", 0)) <= e and isinstance(u.get("phases"), dict):
            for k, v in u["phases"].items():
                acc.setdefault(k, []).append(float(v))
    return {k: statistics.fmean(v) for k, v in acc.items()}


def build_ingest(trial: TrialRecord, exec_outcome: str, exec_reason: str, start: float | None,
                 end: float | None, master_key: bytes, references: list[Receipt], spec: JudgeSpec,
                 devices: int, capacity_gib: float) -> tuple[Ingest, Receipt | None]:
    """Verify and summarise one finished trial.

    ``references`` are the campaign's accepted reference receipts (empty while judging the references
    themselves, which are checked for completion only).  ``devices`` counts GPUs (at least 1: a CPU trial
    occupies one slot) for the GPU-seconds in the cost ledger.
    """
    out = Path(trial.outdir)
    raw_path = out / "receipt.json"
    raw = raw_path.read_bytes() if raw_path.is_file() else None
    wall = (end - start) if (start is not None and end is not None and end >= start) else 0.0
    base: dict[str, Any] = {"start_time": start, "end_time": end}
    if raw is None:
        reason = exec_reason or "the job produced no receipt"
        return Ingest(outcome=exec_outcome if exec_outcome != "ok" else "crash", reason=reason, receipt_raw=None,
                      signature_ok=False, gpu_seconds=wall * devices, **base), None
    try:
        receipt = load_receipt(raw, master_key, trial.trial_key)
    except ReceiptError as exc:
        v = integrity_verdict(str(exc))
        return Ingest(outcome="rejected", reason=f"L0 signature: {exc}", receipt_raw=raw, signature_ok=False,
                      verdicts=_verdict_items(v), first_failed_layer="L0", gpu_seconds=wall * devices, **base), None
    if not wall:
        wall = float(receipt.wrapper.get("wall_s") or 0.0)
    gpu_seconds = wall * devices
    outcome = classify_outcome(receipt)
    if exec_outcome == "cancelled":
        outcome = "cancelled"
    details: dict[str, Any] = {"signature": receipt.signature, "phases": phases(receipt, spec.window),
                               "header_extra": (receipt.header or {}).get("extra") or {}}
    peak = peak_mem(receipt)
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
    step = window_mean_step_time(receipt, spec.window)
    details["window_step_times"] = window_step_times(receipt, spec.window)
    loss = window_loss(receipt, spec.window)
    kind = "near_cap" if peak is not None and peak > 0.97 * capacity_gib else "exact"
    if trial.stage == "reference" or not references:
        return Ingest(outcome="ok", reason="reference run completed", receipt_raw=raw, signature_ok=True,
                      step_time_s=step, peak_mem_gib=peak, censor_kind=kind, loss_window_mean=loss, accepted=True,
                      details=details, gpu_seconds=gpu_seconds, **base), receipt
    verdict = judge(receipt, references, spec)
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
