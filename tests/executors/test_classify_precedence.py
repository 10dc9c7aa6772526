"""One outcome classifier: the executor's view of a receipt and the verifier's agree on every wrapper section."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from infrarsi.controller.executors.classify import classify
from infrarsi.verifier.receipt import Receipt, classify_outcome, wrapper_outcome

OOMS: list[Any] = [None, {"requested_gib": 2.0, "free_gib": 0.5}]
ERRORS: list[list[dict[str, str]]] = [[], [{"kind": "oom", "line": "CUDA out of memory"}],
                                      [{"kind": "traceback", "line": "Traceback"}]]


def _wrapper(rc: int | None, sig: int | None, timed_out: bool, oom: Any, errors: list[dict[str, str]]) -> dict:
    return {"exit_code": rc, "signal": sig, "timed_out": timed_out, "oom": oom, "errors": errors}


def _receipt(wrapper: dict[str, Any], complete: bool) -> Receipt:
    updates = [{"index": 1}, {"index": 2}]
    return Receipt.from_dict({"schema": "infrarsi.receipt/1", "trial_id": "t", "header": None, "updates": updates,
                              "footer": {"completed": 2} if complete else None, "wrapper": wrapper})


@pytest.mark.parametrize("rc,sig,timed_out,oom,errors", list(itertools.product(
    [0, 1, None], [None, 9], [False, True], OOMS, ERRORS)))
def test_executor_and_verifier_share_one_precedence(rc: int | None, sig: int | None, timed_out: bool, oom: Any,
                                                   errors: list[dict[str, str]]) -> None:
    w = _wrapper(rc, sig, timed_out, oom, errors)
    want, _ = wrapper_outcome(w)
    # the verifier: the same precedence, plus completion for ok
    assert classify_outcome(_receipt(w, complete=True)) == want
    assert classify_outcome(_receipt(w, complete=False)) == ("crash" if want == "ok" else want)
    # the executor, with a backend state that has nothing to add
    got = classify({"wrapper": w}, "FAILED", rc, sig, "")
    assert got.outcome == want, got.reason
    assert got.reason and "\n" not in got.reason


def test_oom_wins_over_timeout_in_both() -> None:
    """The old verifier said timeout, the executor oom: an OOM that then hung until the timeout is an OOM."""
    w = _wrapper(None, 9, True, {"requested_gib": 4.0, "free_gib": 1.0}, [])
    assert classify_outcome(_receipt(w, complete=False)) == "oom"
    c = classify({"wrapper": w}, "TIMEOUT", None, 9, "")
    assert c.outcome == "oom" and "requested 4.0 GiB" in c.reason


def test_backend_state_explains_only_what_the_receipt_calls_a_crash() -> None:
    w = _wrapper(None, 15, False, None, [])
    assert wrapper_outcome(w)[0] == "crash"
    assert classify({"wrapper": w}, "CANCELLED", None, 15, "").outcome == "cancelled"
    assert classify({"wrapper": w}, "TIMEOUT", None, 15, "").outcome == "timeout"
    # a receipt that says ok is not overridden by the scheduler
    assert classify({"wrapper": _wrapper(0, None, False, None, [])}, "FAILED", 1, None, "").outcome == "ok"


def test_odd_wrapper_sections_never_raise() -> None:
    for w in ({}, {"errors": "x"}, {"errors": [1, None]}, {"oom": {"requested_gib": None}}, []):
        outcome, reason = wrapper_outcome(w)
        assert outcome in ("ok", "oom", "timeout", "crash") and reason
