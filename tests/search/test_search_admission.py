"""controller/search/admission.py: the near-copy relation on a bare failure ledger, and its per-tell cache."""

from __future__ import annotations

from infrarsi.controller.search.admission import NearCopies
from infrarsi.controller.search.failures import FailureLedger
from infrarsi.controller.search.space import KnobSpec, Outcome, SearchSpace

TUNE = {"suspect_share": 0.4, "common_factor": True}
SPACE = SearchSpace(tuple(KnobSpec(n, (False, True), False, prior_mean={True: 0.10}) for n in "abcd"), ())
REF = SPACE.reference()


def _setup() -> tuple[FailureLedger, NearCopies]:
    led = FailureLedger()
    led.risk = lambda s: 0.10  # every setting bold against a gate of 0.02
    return led, NearCopies(led, SPACE, TUNE, gate=0.02)


def test_a_second_busy_near_copy_is_refused_and_a_pass_clears_it_at_the_next_tell():
    led, near = _setup()
    crashed = REF.with_values({n: True for n in "abcd"})
    one, two = crashed.with_values({"a": False}), crashed.with_values({"b": False})
    assert near.refusal(two, [one], tells=0) is None  # no crash yet
    led.record(frozenset(crashed.settings(SPACE)), Outcome("crash", reason="x"), lambda s: 0.0)
    assert near.records(one, tells=1) == frozenset({0}) == near.records(two, tells=1)
    assert near.refusal(one, [], tells=1) is None  # alone it tests the blame
    why = near.refusal(two, [one], tells=1)
    assert why is not None and "unresolved crash" in why
    # b, c, d pass together: the crash's open pairs all hold a now, so "one" (without a) holds none of them and
    # "two" may run beside it; a cache that outlived the tell would still refuse it
    led.record(frozenset(REF.with_values({"b": True, "c": True, "d": True}).settings(SPACE)), Outcome(
        "ok", step_time_s=1.0), lambda s: 0.0)
    assert near.records(one, tells=2) == frozenset()
    assert near.refusal(two, [one], tells=2) is None


def test_mild_records_name_no_near_copies():
    led, near = _setup()
    led.risk = lambda s: 0.01
    crashed = REF.with_values({n: True for n in "abcd"})
    led.record(frozenset(crashed.settings(SPACE)), Outcome("crash", reason="x"), lambda s: 0.0)
    assert near.records(crashed.with_values({"a": False}), tells=1) == frozenset()
