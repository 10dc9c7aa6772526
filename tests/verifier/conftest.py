"""Fixtures for the verifier tests: a factory of receipt dicts shaped exactly as the exec wrapper writes them."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from infrarsi.verifier.receipt import Receipt
from verifier_receipts import N, WINDOW, receipt_dict

@pytest.fixture
def make() -> Callable[..., Receipt]:
    """``make(edit=None, **kw)``: a Receipt from :func:`receipt_dict`; ``edit(d)`` mutates the dict first."""

    def _make(edit: Callable[[dict], None] | None = None, **kw: Any) -> Receipt:
        d = copy.deepcopy(receipt_dict(**kw))
        if edit is not None:
            edit(d)
        return Receipt.from_dict(d)

    return _make


@pytest.fixture
def spec():
    """The JudgeSpec matching :func:`receipt_dict`."""
    from infrarsi.verifier.spec import JudgeSpec

    return JudgeSpec(updates=N, window=WINDOW, tokens_per_update=256, seq_len=16, memory_cap_gib=1.0,
                     precision_menu=("fp32", "bf16"), frozen_manifest={"f.py": "aa"}, static_invariants=("global_batch",))
