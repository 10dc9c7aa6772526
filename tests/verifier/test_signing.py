"""Signing and loading: canonical form, per-trial keys, unsigned / edited / wrong-schema / replayed receipts."""

from __future__ import annotations

import json

import pytest

from verifier_receipts import receipt_dict
from infrarsi.verifier import signing
from infrarsi.verifier.receipt import ReceiptError, classify_outcome, load_receipt

MASTER = bytes(range(32))


def _signed(d: dict, trial_id: str = "t1") -> dict:
    d = dict(d, trial_id=trial_id)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, trial_id))
    return d


def test_derived_keys_differ_per_trial_and_canonical_form_is_order_free():
    assert signing.derive_trial_key(MASTER, "a") != signing.derive_trial_key(MASTER, "b")
    assert len(signing.derive_trial_key(MASTER, "a")) == 32
    assert signing.canonical_bytes({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        signing.canonical_bytes({"x": float("nan")})


def test_valid_receipt_loads(tmp_path):
    p = tmp_path / "receipt.json"
    p.write_text(json.dumps(_signed(receipt_dict())))
    r = load_receipt(p, MASTER, "t1")
    assert r.trial_id == "t1" and r.completed == 12 and classify_outcome(r) == "ok"


@pytest.mark.parametrize("mutate,prefix", [
    (lambda d: d.update(signature=None), "unsigned"),
    (lambda d: d.pop("signature"), "unsigned"),
    (lambda d: d["updates"][0].update(wall_t=0.5), "bad signature"),
    (lambda d: d["wrapper"].update(exit_code=0, timed_out=True), "bad signature"),
    (lambda d: d.update(trial_id="t2"), "bad signature"),
])
def test_tampering_is_rejected(mutate, prefix):
    d = _signed(receipt_dict())
    mutate(d)
    with pytest.raises(ReceiptError, match=f"^{prefix}"):
        load_receipt(json.dumps(d).encode(), MASTER, "t1")


def test_wrong_schema_even_when_correctly_signed():
    d = receipt_dict()
    d["schema"] = "infrarsi.receipt/0"
    with pytest.raises(ReceiptError, match="^wrong schema"):
        load_receipt(json.dumps(_signed(d)).encode(), MASTER, "t1")


def test_replayed_receipt_of_another_trial():
    raw = json.dumps(_signed(receipt_dict(), "t1")).encode()
    with pytest.raises(ReceiptError, match="^replayed: .*'t1'.*'t9'"):
        load_receipt(raw, MASTER, "t9")
    assert load_receipt(raw, MASTER, None).trial_id == "t1"


def test_other_master_key_and_garbage():
    raw = json.dumps(_signed(receipt_dict())).encode()
    with pytest.raises(ReceiptError, match="^bad signature"):
        load_receipt(raw, b"other", "t1")
    with pytest.raises(ReceiptError, match="not valid JSON"):
        load_receipt(b"{nope", MASTER, "t1")
    with pytest.raises(ReceiptError, match="cannot read"):
        load_receipt("/nonexistent/receipt.json", MASTER, "t1")


@pytest.mark.parametrize("edit,outcome", [
    (lambda d: d["wrapper"].update(timed_out=True, exit_code=None, signal=15), "timeout"),
    (lambda d: d["wrapper"].update(oom={"requested_gib": 2.0, "free_gib": 1.0}, exit_code=1), "oom"),
    (lambda d: d["wrapper"].update(exit_code=1), "crash"),
    (lambda d: d.update(footer=None), "crash"),
])
def test_classify_outcome(make, edit, outcome):
    assert classify_outcome(make(edit)) == outcome


def test_key_files_are_hex(tmp_path):
    p = tmp_path / "k"
    signing.write_key_file(str(p), MASTER)
    assert (p.stat().st_mode & 0o777) == 0o600
    assert signing.read_key_file(str(p)) == MASTER
    p.write_text("not hex")
    with pytest.raises(ValueError, match="not hex"):
        signing.read_key_file(str(p))
