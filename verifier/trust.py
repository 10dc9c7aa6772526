"""Trust checks beyond the paper's 16 invariants: bounded receipts and the executor's independent clock.

Pure functions, no I/O.  The training job is untrusted; everything here reads only what the exec wrapper
signed (``receipt["wrapper"]``) and what the executor observed from outside the trial.

* :data:`MAX_RECEIPT_BYTES`: the hard cap on a raw receipt; :func:`infrarsi.verifier.receipt.load_receipt`
  refuses bigger ones before parsing (``oversized: N bytes > cap C``) and the controller never reads more.
* :func:`limits_problem`: the L1 part of ``completes`` -- dropped receipt lines/bytes, far more update lines
  than the contract's updates, a trial tree over its disk limit.
* :func:`executor_clock`: the L5 invariant ``executor_clock`` -- the receipt's claimed timeline against the
  executor's own start/end wall times (local: the executor's launch time and the shim's end time; Slurm:
  sacct Start/End).

Slack (documented in docs/verifier.md): clocks of different nodes may disagree by ``SKEW_S + SKEW_FRAC * D``
(5 s + 1 % of the executor's duration D); the wrapper's start-up and tear-down outside its own clock (interpreter
start, key and manifest reads, sandbox set-up, frozen-file hashing, disk accounting, receipt write) may take
``OVERHEAD_S + OVERHEAD_FRAC * D`` (30 s + 10 %) on top of that.
"""

from __future__ import annotations

import math
from typing import Any

from infrarsi.verifier.receipt import MAX_RECEIPT_BYTES, Receipt, num
from infrarsi.verifier.spec import Item, JudgeSpec

__all__ = ["MAX_RECEIPT_BYTES", "SKEW_S", "SKEW_FRAC", "OVERHEAD_S", "OVERHEAD_FRAC", "update_slack",
           "limits_problem", "limits_note", "isolation_mode", "executor_clock"]
#: Clock skew allowed between the executor's node and the trial's node: seconds + fraction of the duration.
SKEW_S, SKEW_FRAC = 5.0, 0.01
#: Wrapper work outside its own clock (start-up before the job, accounting after it): seconds + fraction.
OVERHEAD_S, OVERHEAD_FRAC = 30.0, 0.10
GIB = float(1 << 30)


def update_slack(updates: int) -> int:
    """Update lines tolerated beyond the contract's count before a receipt counts as over its limit."""
    return max(2, math.ceil(0.05 * updates))


def _int(v: Any) -> int:
    """A non-negative int from a signed wrapper field (anything else counts as 0)."""
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def limits_problem(trial: Receipt, spec: JudgeSpec) -> str | None:
    """One-line reason when the receipt is over its limits, else None.

    Over its limits: the wrapper dropped receipt lines or bytes at its caps (``wrapper.limits``), the receipt
    holds more than ``spec.updates + update_slack`` update lines, or the trial's writable tree exceeded its disk
    limit.  Receipts without ``wrapper.limits`` (older wrappers) are judged on the update count alone.
    """
    w = trial.wrapper
    lim = w.get("limits") if isinstance(w.get("limits"), dict) else {}
    n = len(trial.updates)
    lines_dropped, bytes_dropped = _int(lim.get("receipt_lines_dropped")), _int(lim.get("receipt_bytes_dropped"))
    if lines_dropped:
        cap = lim.get("max_receipt_lines")
        kept = n + (trial.header is not None) + (trial.footer is not None) + _int(w.get("bad_lines"))
        return (f"receipt over its limit: {kept + lines_dropped} receipt lines for {spec.updates} updates "
                f"({lines_dropped} dropped at the wrapper's cap{f' of {cap}' if cap is not None else ''})")
    if bytes_dropped:
        cap = lim.get("max_receipt_bytes")
        return (f"receipt over its limit: {bytes_dropped} receipt bytes dropped at the wrapper's cap"
                f"{f' of {cap} bytes' if cap is not None else ''}")
    if n > spec.updates + update_slack(spec.updates):
        return f"receipt over its limit: {n} update lines for {spec.updates} updates"
    if lim.get("disk_exceeded") is True:
        used, cap = num(lim.get("disk_used_bytes")), num(lim.get("disk_limit_bytes"))
        used_s = f"{used / GIB:.1f} GiB" if math.isfinite(used) else "unknown size"
        cap_s = f"{cap / GIB:g} GiB" if math.isfinite(cap) else "its cap"
        return f"trial scratch over its disk limit: {used_s} > {cap_s}"
    return None


def limits_note(trial: Receipt) -> str:
    """Non-rejecting notes for the ``completes`` reason (job log truncated), or an empty string."""
    lim = trial.wrapper.get("limits")
    dropped = _int(lim.get("log_bytes_dropped")) if isinstance(lim, dict) else 0
    return f"; job log truncated ({dropped} bytes dropped)" if dropped else ""


def isolation_mode(receipt: Receipt) -> str | None:
    """``wrapper.isolation.mode`` ("bwrap", "none", ...) or None for receipts that predate it."""
    iso = receipt.wrapper.get("isolation")
    mode = iso.get("mode") if isinstance(iso, dict) else None
    return str(mode) if mode is not None else None


def _slack(duration: float) -> float:
    return SKEW_S + SKEW_FRAC * duration


def executor_clock(trial: Receipt, executor_window: tuple[float | None, float | None] | None) -> Item:
    """L5 ``executor_clock``: the receipt's timeline fits what the executor saw from outside the trial.

    ``executor_window`` = (start, end) unix seconds from the executor.  With D = end - start and
    s = SKEW_S + SKEW_FRAC * D, the item passes when

    * ``clock.start_unix >= start - s``, ``clock.end_unix <= end + s`` and ``start_unix <= end_unix``;
    * ``|(end_unix - start_unix) - wall_s| <= s`` (the wrapper's wall clock and monotonic clock agree);
    * ``wall_s <= D + s``, the last wrapper stamp (``wall_t``) ``<= D + s`` and the sum of the job's
      ``step_time_s`` ``<= D + s`` (nothing claims more time than the executor saw);
    * ``D - wall_s <= s + OVERHEAD_S + OVERHEAD_FRAC * D`` (nothing claims a much shorter run than the
      executor saw: a receipt whose clock was compressed to fake a speed-up).

    Unchecked and not required when the executor gave no times or the receipt predates ``wrapper.clock``.
    """
    name, layer = "executor_clock", "L5"
    start, end = executor_window if executor_window is not None else (None, None)
    if start is None or end is None or not (math.isfinite(start) and math.isfinite(end)) or end < start:
        return Item(name, layer, "unchecked", "the executor recorded no start/end times", required=False)
    clock = trial.wrapper.get("clock")
    if not isinstance(clock, dict):
        return Item(name, layer, "unchecked", "the receipt predates the wrapper's wall clock", required=False)
    c0, c1, wall = num(clock.get("start_unix")), num(clock.get("end_unix")), num(trial.wrapper.get("wall_s"))
    if not all(math.isfinite(x) for x in (c0, c1, wall)):
        return Item(name, layer, "fail", "the wrapper's clock or wall time is not a number")
    dur = end - start
    s = _slack(dur)
    if c0 < start - s:
        return Item(name, layer, "fail", f"the wrapper claims to start {start - c0:.1f} s before the executor "
                                         f"started the job (slack {s:.1f} s)")
    if c1 > end + s:
        return Item(name, layer, "fail", f"the wrapper claims to end {c1 - end:.1f} s after the executor saw the "
                                         f"job end (slack {s:.1f} s)")
    if c1 < c0:
        return Item(name, layer, "fail", "the wrapper's clock ends before it starts")
    if abs((c1 - c0) - wall) > s:
        return Item(name, layer, "fail", f"the wrapper's wall clock spans {c1 - c0:.1f} s but its wall_s says "
                                         f"{wall:.1f} s")
    if wall > dur + s:
        return Item(name, layer, "fail", f"wall_s {wall:.1f} s exceeds the executor's {dur:.1f} s")
    stamps = [num(u.get("wall_t")) for u in trial.updates] + [num((trial.footer or {}).get("wall_t"))]
    stamps = [t for t in stamps if math.isfinite(t)]
    if stamps and max(stamps) > dur + s:
        return Item(name, layer, "fail", f"updates stamped up to {max(stamps):.1f} s, beyond the executor's "
                                         f"{dur:.1f} s")
    job = [num(u.get("step_time_s")) for u in trial.updates if u.get("step_time_s") is not None]
    job_sum = math.fsum(t for t in job if math.isfinite(t) and t > 0)
    if job_sum > dur + s:
        return Item(name, layer, "fail", f"the job's step times sum to {job_sum:.1f} s, more than the executor's "
                                         f"{dur:.1f} s")
    outside = dur - wall
    allowed = s + OVERHEAD_S + OVERHEAD_FRAC * dur
    if outside > allowed:
        return Item(name, layer, "fail", f"the executor saw {dur:.1f} s but the receipt accounts for {wall:.1f} s "
                                         f"({outside:.1f} s unaccounted > {allowed:.1f} s allowed)")
    return Item(name, layer, "pass", f"wrapper clock {wall:.1f} s inside the executor's {dur:.1f} s "
                                     f"({outside:.1f} s outside, <= {allowed:.1f} s allowed)")
