"""The receipt byte cap: refused before parsing, files never read past the cap, the stored marker re-judges alike."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest

from verifier_receipts import receipt_dict
from infrarsi.verifier import signing
from infrarsi.verifier.judge import judge_raw
from infrarsi.verifier.receipt import (
    MAX_RECEIPT_BYTES, ReceiptError, load_receipt, oversized_marker, read_capped,
)
from infrarsi.verifier.spec import JudgeSpec

MASTER = b"\x03" * 32


def _raw(trial_id: str = "t1") -> bytes:
    d = dict(receipt_dict(), trial_id=trial_id)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, trial_id))
    return json.dumps(d).encode()


def test_a_valid_receipt_over_the_cap_is_refused_before_its_signature_is_checked():
    raw = _raw()
    assert load_receipt(raw, MASTER, "t1", max_bytes=len(raw)).trial_id == "t1"
    with pytest.raises(ReceiptError, match=f"^oversized: {len(raw)} bytes > cap {len(raw) - 1} bytes$"):
        load_receipt(raw, MASTER, "t1", max_bytes=len(raw) - 1)


def test_a_huge_file_is_not_read(tmp_path: Path):
    """Attack: a 64 MiB sparse receipt.json; loading it reads nothing past the cap (peak RSS stays put)."""
    p = tmp_path / "receipt.json"
    with open(p, "wb") as fh:
        fh.truncate(64 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ReceiptError, match=f"^oversized: {64 << 20} bytes > cap {MAX_RECEIPT_BYTES} bytes$"):
        load_receipt(p, MASTER, "t1")
    assert read_capped(p) == (None, 64 << 20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 16 * 1024   # KiB


def test_the_stored_marker_is_an_l0_oversized_verdict():
    v = judge_raw(oversized_marker(123_456_789, MAX_RECEIPT_BYTES), [_raw("ref")], JudgeSpec(updates=12, window=(4, 12)),
                  MASTER, "t1")
    assert v.first_failed_layer == "L0"
    assert v.summary() == f"rejected at L0 signature: oversized: 123456789 bytes > cap {MAX_RECEIPT_BYTES} bytes"


def test_deeply_nested_garbage_is_a_one_line_error():
    with pytest.raises(ReceiptError, match="not valid JSON"):
        load_receipt(b"[" * 200_000, MASTER, "t1")
