"""The narrow controller interface (controller/search/view.py): operators see a read-only SearchView."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from infrarsi.controller.search import batch, proposals
from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.view import FollowUps, SearchView, view_of

from tests.search.conftest import make_noise, toy_evaluate, toy_space

ROOT = Path(__file__).resolve().parents[2]


def ctrl() -> SearchController:
    return SearchController(toy_space(), make_noise(), 1.0, 80.0, seed=0, reference_peak_mem_gib=70.0)


def test_operator_modules_touch_no_controller_attribute():
    """proposals.py and batch.py never name the controller's attributes, only the view's public ones."""
    public = {n for n in dir(SearchView) if not n.startswith("_")}
    for name in ("proposals.py", "batch.py"):
        tree = ast.parse((ROOT / "controller/search" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "view":
                assert node.attr in public, f"{name}: view.{node.attr}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ctrl":
                pytest.fail(f"{name}: ctrl.{node.attr}")


def test_the_view_is_read_only_and_live():
    c = ctrl()
    v = c.view
    with pytest.raises(AttributeError):
        v.incumbent = c.reference  # type: ignore[misc]
    with pytest.raises(TypeError):
        v.tune["beta"] = 3.0  # type: ignore[index]
    with pytest.raises(ValueError):
        v.prior_mu[0] = 1.0
    assert isinstance(v.history, tuple) and isinstance(v.told, frozenset) and isinstance(v.queue, tuple)
    (cand,) = c.ask(1)
    assert v.is_outstanding(cand) and not v.is_told(cand)
    c.tell(cand, toy_evaluate(cand))
    assert v.is_told(cand) and v.history[-1][0] == cand  # live, not a snapshot
    assert view_of(c) is v and view_of(v) is v


def test_per_tell_values_are_computed_once_per_tell_and_recomputed_after_one():
    c = ctrl()
    v = c.view
    calls: list[int] = []

    def told() -> int:
        calls.append(len(v.history))
        return len(v.history)

    assert v.per_tell("n", told) == 0 and v.per_tell("n", told) == 0 and calls == [0]
    (cand,) = c.ask(1)
    assert v.per_tell("n", told) == 0 and calls == [0]  # an ask changes no history
    c.tell(cand, toy_evaluate(cand))
    assert v.per_tell("n", told) == 1 and v.per_tell("n", told) == 1 and calls == [0, 1]


def test_follow_ups_keep_tags_of_dropped_entries():
    f = FollowUps()
    c = ctrl()
    a, b = c.starts[0], c.starts[1]
    assert f.add("extrapolate", a) and f.add("revert", b) and not f.add("bundle", a)
    f.drop(lambda tag, cand: tag != "extrapolate")
    assert [x for _, x in f.items] == [b] and f.tags[a] == "extrapolate"
    assert not f.add("bundle", a)  # queued once per search


def test_public_operator_functions_accept_the_controller_or_its_view():
    c = ctrl()
    assert proposals.untested_patches(c) == proposals.untested_patches(c.view)
    assert proposals.config_upside(c) == proposals.config_upside(c.view)
    assert batch.hedges_of(c, c.starts[0]) == batch.hedges_of(c.view, c.starts[0])
    assert np.isfinite(proposals.config_upside(c))
