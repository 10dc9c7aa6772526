"""How well the search's memory prior predicts each landscape's peaks before any trial, with and without the
activation-mechanism memory interactions (tuning key ``memory_activation_pairs``; session 23 in
bench/RESULTS.md).

For each named landscape (default: all in ``bench/landscapes``), up to 3,000 legal configurations (sampled with
seed 0 where the space is larger) are predicted by ``MemoryModel`` from the stated ``mem_prior_gib`` alone, once
additive and once with the pairs.  Prints the mean absolute error (GiB) and the share of configurations the
prediction puts on the wrong side of the capacity, for each.

    python bench/memory_prior_pairs.py transfer_h100_starcoder15b heldout_gpt_mig40
"""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import numpy as np

from infrarsi.controller.search.features import FeatureMap
from infrarsi.controller.search.landscape import load_landscape
from infrarsi.controller.search.models import MemoryModel
from infrarsi.controller.search.space import Candidate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from memory_forms import _mem  # noqa: E402  (bench/ is not a package)


def compare(name: str, sample: int = 3000) -> str:
    land = load_landscape(HERE / "landscapes" / f"{name}.py")
    knobs, cap = land.space.knobs, land.capacity_gib
    m0 = _mem(land, land.space.reference_config())
    if m0 is None:
        return f"{name:32s} the reference reports no peak"
    configs = list(itertools.product(*(k.values for k in knobs)))
    if len(configs) > sample:
        configs = random.Random(0).sample(configs, sample)
    cands, truth = [], []
    for values in configs:
        d = {k.name: v for k, v in zip(knobs, values)}
        if land.space.legal(d) and (m := _mem(land, d)) is not None:
            cands.append(Candidate.from_dict(d))
            truth.append(m)
    t = np.asarray(truth)
    cols = []
    for pairs in (False, True):
        fmap = FeatureMap(land.space)
        mm = MemoryModel(land.space, fmap, cap, m0, activation_pairs=pairs)
        mu = mm.predict(fmap.encode(cands))[0]
        cols.append(f"error {np.abs(mu - t).mean():5.1f} GiB, wrong side {np.mean((mu > cap) != (t > cap)):.2f}"
                    f" ({len(mm.pairs)} pairs)")
    return f"{name:32s} additive: {cols[0]}  |  with pairs: {cols[1]}"


def main(argv: list[str]) -> None:
    names = argv or sorted(p.stem for p in (HERE / "landscapes").glob("*.py"))
    for n in names:
        print(compare(n), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
