"""How additive each landscape's memory is: its true peak against two predictions from the single-setting deltas.

For every landscape in ``bench/landscapes`` (or those named on the command line), each setting's true peak with
only that setting changed from the reference gives a delta; every legal configuration (20,000 sampled where the
space is larger) is then predicted additively (reference + the sum of the deltas) and multiplicatively
(reference x the product of the ratios).  Prints the mean absolute error (GiB) of each and the share of
configurations each calls on the wrong side of the capacity.  A memory model that assumes one form is right on
the landscapes where that form's error is 0 (session 22 in bench/RESULTS.md).

    python bench/memory_forms.py
    python bench/memory_forms.py transfer_h100_starcoder15b heldout_gpt_mig40
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path

import numpy as np

from infrarsi.controller.search.landscape import Landscape, load_landscape

HERE = Path(__file__).resolve().parent


def _mem(land: Landscape, config: dict) -> float | None:
    r = land.module.evaluate(config, [], None)
    if r["status"] == "ok":
        return r.get("peak_mem_gib")
    return r["requested_gib"] if r["status"] == "oom" else None


def compare(land: Landscape, sample: int = 20000) -> str:
    knobs, C = land.space.knobs, land.capacity_gib
    ref = {k.name: k.reference for k in knobs}
    m0 = _mem(land, ref)
    if m0 is None:
        return f"{land.name:32s} the reference reports no peak"
    single = {}
    for k in knobs:
        for v in k.values:
            d = {**ref, k.name: v}
            if v != k.reference and land.space.legal(d) and (m := _mem(land, d)) is not None:
                single[(k.name, v)] = m
    configs = list(itertools.product(*(k.values for k in knobs)))
    if len(configs) > sample:
        configs = random.Random(0).sample(configs, sample)
    err_add, err_log, wrong_add, wrong_log = [], [], 0, 0
    for values in configs:
        d = {k.name: v for k, v in zip(knobs, values)}
        changed = [(k.name, d[k.name]) for k in knobs if d[k.name] != k.reference]
        if not land.space.legal(d) or any(s not in single for s in changed) or (m := _mem(land, d)) is None:
            continue
        add = m0 + sum(single[s] - m0 for s in changed)
        log = m0 * math.exp(sum(math.log(single[s] / m0) for s in changed))
        err_add.append(add - m)
        err_log.append(log - m)
        wrong_add += (add <= C) != (m <= C)
        wrong_log += (log <= C) != (m <= C)
    n = len(err_add)
    return (f"{land.name:32s} C={C:5.0f} ref={m0:5.1f} n={n:6d}  additive: error {np.abs(err_add).mean():5.1f} GiB, "
            f"wrong side {wrong_add / n:.3f}  |  ratios: error {np.abs(err_log).mean():5.1f} GiB, "
            f"wrong side {wrong_log / n:.3f}")


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem for p in (HERE / "landscapes").glob("*.py"))
    for name in names:
        print(compare(load_landscape(HERE / "landscapes" / f"{name}.py")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
