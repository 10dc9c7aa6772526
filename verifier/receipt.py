"""The receipt schema (``infrarsi.receipt/1``), loading with signature/replay checks, and outcome classes.

A receipt is the JSON object the exec wrapper writes: ``schema``, ``trial_id``,
``header`` (or null), ``updates`` (each as emitted plus ``wall_t``), ``footer`` (or
null), ``wrapper`` (exit code, signal, timeout, wall time, OOM, error lines, frozen-file
hashes, memory cap, argv) and ``signature`` (hex HMAC-SHA256, see :mod:`infrarsi.verifier.signing`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.verifier import signing

SCHEMA = "infrarsi.receipt/1"
#: schema of the small marker the controller stores instead of an oversized receipt (see :func:`oversized_marker`)
OVERSIZED_SCHEMA = "infrarsi.receipt-oversized/1"
#: hard cap on a raw receipt in bytes (same value as :data:`infrarsi.verifier.trust.MAX_RECEIPT_BYTES`)
MAX_RECEIPT_BYTES = 16 * 1024 * 1024


class ReceiptError(ValueError):
    """A receipt cannot be trusted or read; the message is one line naming why."""


def num(value: Any) -> float:
    """Receipt number -> float, turning the emitter's ``"NaN"``/``"Infinity"`` strings back.

    Anything that is not a number or such a string (None, bools, objects, text written
    by a misbehaving job) becomes NaN, so judging never raises on odd receipts.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class Receipt:
    """A parsed receipt (see module docstring for the fields).  ``data`` is the full JSON object."""

    schema: str
    trial_id: str
    header: dict[str, Any] | None
    updates: list[dict[str, Any]]
    footer: dict[str, Any] | None
    wrapper: dict[str, Any]
    signature: str | None
    data: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Receipt":
        """Build without any signature check (tests, already-verified stores); raises ``ReceiptError`` on bad shape."""
        if not isinstance(d, dict):
            raise ReceiptError("receipt: top level is not a JSON object")
        updates = d.get("updates")
        if not isinstance(updates, list) or not all(isinstance(u, dict) for u in updates):
            raise ReceiptError("receipt: 'updates' is not a list of objects")
        wrapper = d.get("wrapper")
        if not isinstance(wrapper, dict):
            raise ReceiptError("receipt: 'wrapper' section missing")
        header = d.get("header")
        footer = d.get("footer")
        return cls(
            schema=str(d.get("schema")),
            trial_id=str(d.get("trial_id")),
            header=header if isinstance(header, dict) else None,
            updates=list(updates),
            footer=footer if isinstance(footer, dict) else None,
            wrapper=wrapper,
            signature=d.get("signature") if isinstance(d.get("signature"), str) else None,
            data=d,
        )

    @property
    def completed(self) -> int:
        """Number of update lines the wrapper received."""
        return len(self.updates)

    def to_bytes(self) -> bytes:
        """The receipt as UTF-8 JSON (the form stored and signed)."""
        return json.dumps(self.data, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")


def oversized_message(size: int, cap: int) -> str:
    """The one-line L0 reason for a receipt over the byte cap."""
    return f"oversized: {size} bytes > cap {cap} bytes"


def oversized_marker(size: int, cap: int, sha256: str | None = None) -> bytes:
    """What the controller stores instead of an oversized receipt: a small JSON object that
    :func:`load_receipt` turns back into the ``oversized`` L0 reason (so re-judging agrees)."""
    return json.dumps({"schema": OVERSIZED_SCHEMA, "bytes": int(size), "cap": int(cap), "sha256": sha256},
                      sort_keys=True).encode("utf-8")


def read_capped(path: str | Path, cap: int = MAX_RECEIPT_BYTES) -> tuple[bytes | None, int]:
    """(raw bytes, size) of a receipt file, reading at most ``cap + 1`` bytes; raw is None when the file is over
    ``cap`` (size is then the file's size on disk).  Raises :class:`ReceiptError` when unreadable."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > cap:
                return None, size
            raw = fh.read(cap + 1)
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read ({exc.strerror})") from None
    if len(raw) > cap:  # grew after the size check
        return None, max(size, len(raw))
    return raw, len(raw)


def _parse(path_or_bytes: str | Path | bytes, cap: int) -> dict[str, Any]:
    if isinstance(path_or_bytes, (bytes, bytearray)):
        raw = bytes(path_or_bytes)
        where = "receipt"
        if len(raw) > cap:
            raise ReceiptError(oversized_message(len(raw), cap))
    else:
        where = str(path_or_bytes)
        got, size = read_capped(path_or_bytes, cap)
        if got is None:
            raise ReceiptError(oversized_message(size, cap))
        raw = got
    try:
        d = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ReceiptError(f"{where}: not valid JSON (nested too deeply)") from None
    if not isinstance(d, dict):
        raise ReceiptError(f"{where}: top level is not a JSON object")
    if d.get("schema") == OVERSIZED_SCHEMA and "signature" not in d:
        size, stored_cap = num(d.get("bytes")), num(d.get("cap"))
        raise ReceiptError(oversized_message(int(size) if math.isfinite(size) else -1,
                                             int(stored_cap) if math.isfinite(stored_cap) else cap))
    return d


def load_receipt(path_or_bytes: str | Path | bytes, master_key: bytes, expected_trial_id: str | None,
                 max_bytes: int = MAX_RECEIPT_BYTES) -> Receipt:
    """Load a receipt and prove it is this trial's, untouched, in the current schema.

    First the size: raw receipts over ``max_bytes`` are refused before parsing (a file is never read past
    ``max_bytes + 1``), as is the controller's stored marker of such a receipt: ``oversized: N bytes > cap C``.
    The signature is checked with ``derive_trial_key(master_key, receipt.trial_id)``;
    then the schema; then that ``trial_id`` equals ``expected_trial_id`` (skipped when
    it is ``None``, e.g. for reference receipts whose own id is authenticated).
    Raises :class:`ReceiptError` whose message starts with ``oversized``, ``unsigned``,
    ``bad signature``, ``wrong schema`` or ``replayed`` (or names a read/parse problem).
    """
    d = _parse(path_or_bytes, max_bytes)
    sig = d.get("signature")
    if not isinstance(sig, str) or not sig:
        raise ReceiptError("unsigned: receipt carries no signature")
    tid = d.get("trial_id")
    if not isinstance(tid, str):
        raise ReceiptError("bad signature: receipt has no trial_id to derive its key from")
    try:
        ok = signing.check(d, signing.derive_trial_key(master_key, tid))
    except ValueError:
        ok = False
    if not ok:
        raise ReceiptError("bad signature: receipt was edited after signing or signed with another key")
    if d.get("schema") != SCHEMA:
        raise ReceiptError(f"wrong schema: {d.get('schema')!r}, expected {SCHEMA!r}")
    if expected_trial_id is not None and tid != expected_trial_id:
        raise ReceiptError(f"replayed: receipt belongs to trial {tid!r}, not {expected_trial_id!r}")
    return Receipt.from_dict(d)


def wrapper_outcome(wrapper: Any) -> tuple[str, str]:
    """THE outcome precedence of a finished job from its receipt's ``wrapper`` section (also unverified JSON):

    1. ``oom``: the wrapper recorded an out-of-memory event or an ``oom`` error line (the most informative
       cause: a job that ran out of memory and then hung or was killed is an OOM, which the memory model needs);
    2. ``timeout``: the wrapper's timeout expired;
    3. ``crash``: a signal or a non-zero exit code;
    4. ``ok``: exit code 0, no signal.

    Returns ``(outcome, one-line reason)``.  :func:`classify_outcome` adds completion (the footer) to ``ok``;
    the executors (``controller/executors/classify.py``) call this function and fall back to the scheduler's
    state and the job log only for what it cannot say.
    """
    w = wrapper if isinstance(wrapper, dict) else {}
    errors = w.get("errors") if isinstance(w.get("errors"), list) else []
    if w.get("oom") or any(isinstance(e, dict) and e.get("kind") == "oom" for e in errors):
        detail = w.get("oom")
        extra = ""
        if isinstance(detail, dict) and detail.get("requested_gib") is not None:
            extra = f" (requested {detail.get('requested_gib')} GiB, free {detail.get('free_gib')} GiB)"
        return "oom", f"receipt: out of memory{extra}"
    if w.get("timed_out"):
        return "timeout", "receipt: the wrapper's timeout expired"
    sig, rc = w.get("signal"), w.get("exit_code")
    if sig:
        return "crash", f"receipt: job ended with signal {sig}"
    if rc != 0:
        return "crash", f"receipt: job ended with exit code {rc}"
    return "ok", "receipt: exit code 0"


def classify_outcome(receipt: Receipt) -> str:
    """``"oom"``, ``"timeout"``, ``"crash"`` or ``"ok"``: :func:`wrapper_outcome`'s precedence, then completion:
    ``ok`` also needs a footer whose ``completed`` equals the number of update lines received (else ``crash``).
    """
    outcome, _ = wrapper_outcome(receipt.wrapper)
    if outcome != "ok":
        return outcome
    if receipt.footer is None or receipt.footer.get("completed") != len(receipt.updates):
        return "crash"
    return "ok"
