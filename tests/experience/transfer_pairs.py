"""Structural checks shared by the transfer landscape pairs' tests (bench/landscapes/transfer_*.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from infrarsi.controller.experience.transfer import landscape_environment, landscape_knobs
from infrarsi.controller.search.landscape import load_landscape

LANDS = Path(__file__).resolve().parents[2] / "bench" / "landscapes"

#: effect(side, mechanism, canonical value) -> the landscape's log-speedup of that setting; side is 0 or 1
Effect = Callable[[int, str, str], float]


def check_pair(path_a: Path, path_b: Path, *, knobs: int, skus: tuple[str, str], nodes: int,
               family: str) -> tuple[Any, Any, Effect]:
    """Load a pair and assert what every pair must hold: ``knobs`` knobs each, every flag renamed, the same
    mechanisms and classes in the same order, the stated SKUs, node count and model family, one reference state.
    Returns both landscapes and an ``effect`` lookup by mechanism and canonical value."""
    a, b = load_landscape(path_a), load_landscape(path_b)
    ka, kb = landscape_knobs(a), landscape_knobs(b)
    assert len(ka) == len(kb) == knobs and a.space.size() == b.space.size()
    assert {k.name for k in ka}.isdisjoint({k.name for k in kb})        # every flag renamed
    assert [k.mechanism for k in ka] == [k.mechanism for k in kb]          # the same mechanisms, in order
    assert [k.klass for k in ka] == [k.klass for k in kb]
    ea, eb = landscape_environment(a, ka), landscape_environment(b, kb)
    assert (ea.gpu_sku, eb.gpu_sku) == skus and ea.nodes == eb.nodes == nodes
    assert ea.reference_state == eb.reference_state and ea.model_family == eb.model_family == family
    by = ({k.mechanism: k for k in ka}, {k.mechanism: k for k in kb})
    lands = (a, b)

    def effect(side: int, mech: str, canonical: str) -> float:
        k = by[side][mech]
        return lands[side].module.SPEED[(k.name, k.value_for(canonical))]

    return a, b, effect


def status_of(land: Any, **canon: str) -> str:
    """The landscape's outcome status ("ok", "crash", "oom", ...) of its reference with each named mechanism set to
    the given canonical value (through that landscape's own flag names)."""
    by = {k.mechanism: k for k in landscape_knobs(land)}
    cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
    for mech, value in canon.items():
        cfg[by[mech].name] = by[mech].value_for(value)
    return land.module.evaluate(cfg, [], None)["status"]
