"""Outcome classification: receipt first, then backend state, then log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infrarsi.controller.executors.classify import classify, log_tail, read_receipt


def _receipt(exit_code: int | None = 0, signal: int | None = None, timed_out: bool = False,
             oom: Any = None, errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"schema": "infrarsi.receipt/1", "wrapper": {"exit_code": exit_code, "signal": signal,
                                                        "timed_out": timed_out, "oom": oom, "errors": errors or []}}


@pytest.mark.parametrize("receipt,state,log,cancel,expected", [
    (_receipt(0), "COMPLETED", "", None, "ok"),
    # the receipt wins over a Slurm state that says otherwise
    (_receipt(0), "FAILED", "", None, "ok"),
    (_receipt(1, oom={"requested_gib": 2.0, "free_gib": 0.5}), "FAILED", "", None, "oom"),
    (_receipt(1, errors=[{"kind": "oom", "line": "CUDA out of memory"}]), "FAILED", "", None, "oom"),
    (_receipt(None, signal=9, timed_out=True), "FAILED", "", None, "timeout"),
    (_receipt(None, signal=15), "CANCELLED", "", None, "cancelled"),
    (_receipt(None, signal=15), "TIMEOUT", "", None, "timeout"),
    (_receipt(None, signal=9), "FAILED", "slurmstepd: error: Exceeded job memory limit", None, "oom"),
    (_receipt(1), "FAILED", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", None, "oom"),
    (_receipt(1), "FAILED", "Traceback (most recent call last):\nValueError", None, "crash"),
    (_receipt(None, signal=15), "EXITED", "", "cancelled by request", "cancelled"),
    # no receipt: never trust the Slurm state alone for ok
    (None, "COMPLETED", "", None, "crash"),
    (None, "FAILED", "", None, "crash"),
    (None, "CANCELLED", "", None, "cancelled"),
    (None, "TIMEOUT", "", None, "timeout"),
    (None, "OUT_OF_MEMORY", "", None, "oom"),
    (None, "FAILED", "StepId=3.batch exceeded memory limit (5 > 1), being killed", None, "oom"),
    (None, "CANCELLED by 0", "", None, "cancelled"),
])
def test_classify_table(receipt: dict[str, Any] | None, state: str, log: str, cancel: str | None,
                        expected: str) -> None:
    c = classify(receipt, state, None, None, log, cancel_reason=cancel)
    assert c.outcome == expected, c.reason
    assert c.reason and "\n" not in c.reason


def test_missing_receipt_reason_says_so() -> None:
    c = classify(None, "COMPLETED", 0, None, "")
    assert c.outcome == "crash"
    assert "no receipt" in c.reason and "COMPLETED" in c.reason


def test_receipt_exit_code_is_reported() -> None:
    c = classify(_receipt(3), "FAILED", 1, None, "")
    assert (c.outcome, c.exit_code) == ("crash", 3)
    assert "exit code 3" in c.reason


def test_read_receipt_and_log_tail(tmp_path: Path) -> None:
    assert read_receipt(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_receipt(tmp_path / "bad.json") is None
    (tmp_path / "list.json").write_text("[1]")
    assert read_receipt(tmp_path / "list.json") is None
    big = tmp_path / "big.log"
    big.write_text("x" * 600_000 + "\nCUDA out of memory\n")
    tail = log_tail([big, None, tmp_path / "missing.log"])
    assert tail.endswith("CUDA out of memory\n") and len(tail) < 300_000


def test_oversized_receipt_is_not_read(tmp_path: Path) -> None:
    from infrarsi.controller.executors.classify import read_receipt

    p = tmp_path / "receipt.json"
    p.write_text('{"wrapper": {"exit_code": 0}, "pad": "' + "x" * 4096 + '"}')
    assert read_receipt(p) is not None
    assert read_receipt(p, max_bytes=1024) is None  # refused on its size, before reading


def test_wrapper_refusal_is_the_reason_without_receipt() -> None:
    line = ("infrarsi: error: isolation: bubblewrap /x not available (/x does not exist or is not executable); "
            "install bubblewrap or set INFRARSI_ISOLATION=none on a trusted single-user machine")
    c = classify(None, "EXITED", 2, None, "noise\n" + line + "\n")
    assert c.outcome == "crash" and c.reason.endswith(line)
