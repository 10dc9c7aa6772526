"""Value types: candidates are canonical and hashable, knob specs validate, outcomes check status."""

from __future__ import annotations

import pytest

from infrarsi.controller.search.space import PATCH, Candidate, KnobSpec, Outcome, SearchSpace


def test_candidate_signature_is_canonical_and_hashable():
    a = Candidate.from_dict({"b": 2, "a": True}, ["p2", "p1"])
    b = Candidate.from_dict({"a": True, "b": 2}, ["p1", "p2"])
    assert a == b and hash(a) == hash(b)
    assert a.signature == b.signature and len(a.signature) == 40
    assert Candidate.from_dict({"a": True, "b": 3}).signature != a.signature
    assert a.as_dict() == {"a": True, "b": 2}


def test_settings_and_reference():
    space = SearchSpace((KnobSpec("x", (1, 2), 1), KnobSpec("y", ("a", "b"), "a")), ("p",))
    ref = space.reference()
    assert ref.is_reference(space) and ref.settings(space) == frozenset()
    c = ref.with_values({"y": "b"}, patches={"p"})
    assert not c.is_reference(space)
    assert c.settings(space) == {("y", "b"), (PATCH, "p")}
    assert space.size() == 8


def test_knobspec_validation_and_priors():
    with pytest.raises(ValueError, match="reference"):
        KnobSpec("x", (1, 2), 3)
    k = KnobSpec.from_dict({"name": "x", "values": [1, 2], "reference": 1, "prior_mean": {2: 0.1}})
    assert k.prior_of(2) == 0.1 and k.prior_of(1) == 0.0
    assert hash(k)  # the prior dicts are excluded from hashing
    with pytest.raises(ValueError, match="missing key"):
        KnobSpec.from_dict({"name": "x", "values": [1]})


def test_outcome_validation():
    with pytest.raises(ValueError):
        Outcome("weird")
    with pytest.raises(ValueError):
        Outcome("ok")
    assert Outcome("ok", step_time_s=1.0).status == "ok"


def test_space_check_rejects_foreign_candidates_and_unhashable_values():
    space = SearchSpace((KnobSpec("x", (1, 2), 1),), ("p",))
    space.check(Candidate.from_dict({"x": 2}, ["p"]))
    with pytest.raises(ValueError, match="not one of"):
        space.check(Candidate.from_dict({"x": 3}))
    with pytest.raises(ValueError, match="differ"):
        space.check(Candidate.from_dict({"y": 1}))
    with pytest.raises(ValueError, match="unknown patches"):
        space.check(Candidate.from_dict({"x": 1}, ["q"]))
    with pytest.raises(ValueError, match="hashable"):
        KnobSpec("z", ([1], [2]), [1])
