"""A simulated proposer for the search benchmark: knob and patch priors read off a landscape's truth.

The paper's proposer (a language model or coding agent) states, for each knob setting, a mean log-speedup, a
spread and a peak-memory delta, and for each patch a claimed gain.  On a benchmark landscape the truth is known,
so the benchmark can feed the controller priors of chosen quality and measure what prior quality buys:

* ``none``: no stated prior at all (every knob, memory and patch prior removed; same as ``infrarsi-noprior``);
* ``calibrated``: the true single-setting effects with modest noise (a good proposer);
* ``miscalibrated``: confidently wrong: the true effects shuffled across settings (rank correlation near zero,
  as the paper reports for zero-shot priors), inflated two-fold, memory deltas of the wrong sign, and patch
  claims shuffled and doubled (the controller still shrinks them).

Everything here is deterministic in ``(landscape, mode, seed)`` and never looks at the noisy evaluations the
search later makes.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from infrarsi.controller.search.landscape import Landscape
from infrarsi.controller.search.space import Candidate, SearchSpace

PRIOR_MODES = ("none", "calibrated", "miscalibrated")


def _single_truth(land: Landscape) -> tuple[dict[tuple[str, Any], tuple[float | None, float]], dict[str, float]]:
    """``{(knob, value): (true log-speedup or None when it fails alone, peak-memory delta GiB)}`` and
    ``{patch: true log-gain on the reference (0 when it fails alone)}``."""
    ref = land.space.reference()
    ref_res = land.truth(ref)
    ref_mem = float(ref_res.get("peak_mem_gib") or 0.0)
    knobs: dict[tuple[str, Any], tuple[float | None, float]] = {}
    for k in land.space.knobs:
        for v in k.values:
            if v == k.reference:
                continue
            cand = ref.with_values({k.name: v})
            res = land.truth(cand)
            sp = land.true_speedup(cand) if land.space.legal(cand.as_dict()) else None
            if res["status"] == "oom":
                mem = float(res["requested_gib"]) - ref_mem
            else:
                mem = float(res.get("peak_mem_gib") or ref_mem) - ref_mem
            knobs[(k.name, v)] = (math.log(sp) if sp else None, mem)
    patches: dict[str, float] = {}
    for p in land.space.patches:
        sp = land.true_speedup(Candidate(ref.config, frozenset([p])))
        patches[p] = math.log(sp) if sp else 0.0
    return knobs, patches


def simulated_priors(land: Landscape, mode: str, seed: int = 0) -> tuple[SearchSpace, dict[str, float] | None]:
    """The landscape's space with the proposer's knob priors in place of the stated ones, and its patch claims.

    Returns ``(space, patch_priors)``; ``patch_priors`` is None in mode ``none``.  ValueError on an unknown mode.
    """
    if mode not in PRIOR_MODES:
        raise ValueError(f"priors mode {mode!r}: choose from {', '.join(PRIOR_MODES)}")
    space = land.space
    if mode == "none":
        knobs = tuple(replace(k, prior_mean=None, prior_sd=None, mem_prior_gib=None) for k in space.knobs)
        return SearchSpace(knobs, space.patches, space.is_legal), None
    rng = np.random.default_rng([seed, 4242, PRIOR_MODES.index(mode)])
    truth, patch_truth = _single_truth(land)
    settings = sorted(truth, key=lambda s: (s[0], str(s[1])))
    # a setting that fails alone gets the landscape's stated prior (what a proposer would have said)
    speed = [truth[s][0] if truth[s][0] is not None else space.knob(s[0]).prior_of(s[1]) for s in settings]
    mem = [truth[s][1] for s in settings]
    if mode == "calibrated":
        means = [y + rng.normal(0.0, 0.25 * abs(y) + 0.002) for y in speed]
        spreads = [max(0.5 * abs(y), 0.005) for y in speed]
        mems = [m * (1.0 + rng.normal(0.0, 0.1)) for m in mem]
        claims = {p: g + rng.normal(0.0, 0.25 * abs(g) + 0.002) for p, g in patch_truth.items()}
    else:
        perm = rng.permutation(len(settings))
        means = [2.0 * speed[i] for i in perm]
        spreads = [0.25 * abs(m) for m in means]
        mems = [-0.5 * m for m in mem]
        names = sorted(patch_truth)
        pperm = rng.permutation(len(names))
        claims = {p: 2.0 * abs(patch_truth[names[j]]) for p, j in zip(names, pperm)}
    by_knob: dict[str, dict[str, dict]] = {}
    for s, m, sd, g in zip(settings, means, spreads, mems):
        d = by_knob.setdefault(s[0], {"mean": {}, "sd": [], "mem": {}})
        d["mean"][s[1]] = float(m)
        d["sd"].append(float(sd))
        d["mem"][s[1]] = float(g)
    knobs = tuple(replace(k, prior_mean=by_knob[k.name]["mean"], prior_sd=max(by_knob[k.name]["sd"]),
                          mem_prior_gib=by_knob[k.name]["mem"]) if k.name in by_knob else k for k in space.knobs)
    return SearchSpace(knobs, space.patches, space.is_legal), {p: float(g) for p, g in claims.items()}
