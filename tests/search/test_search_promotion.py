"""Promotion with the one statistic and an honest noise bound (H200 numbers from issue 14)."""

from __future__ import annotations

import math

import numpy as np

from infrarsi.controller.search.promotion import (CANDIDATE_REPEATS, REFERENCE_RERUNS, decide_promotion,
                                                  decide_promotion_detailed, search_evidence)
from infrarsi.controller.search.space import Candidate, Outcome
from infrarsi.surrogate.noise import calibrate
from infrarsi.verifier.invariants import speed_reproduces

STEP = 0.1


def _run(rng: np.random.Generator, gain: float, sigma_pair: float, n: int = 50) -> np.ndarray:
    """One run: run-level offset with SD sigma_pair / sqrt(2) (so a pair differs by sigma_pair), 1% jitter."""
    off = rng.normal(0, sigma_pair / math.sqrt(2))
    return np.exp(math.log(STEP / gain) + off + rng.normal(0, 0.01, n))


def _campaign(seed: int, gain: float, sigma_pair: float, pairs: int = 3):
    rng = np.random.default_rng(seed)
    noise = calibrate([_run(rng, 1.0, sigma_pair) for _ in range(3)])
    cand = Candidate.from_dict({"compile": True})
    reruns = {cand: [(float(_run(rng, 1.0, sigma_pair).mean()), float(_run(rng, gain, sigma_pair).mean()))
                     for _ in range(pairs)]}
    search = {cand: [float(_run(rng, gain, sigma_pair).mean())]}
    return noise, cand, reruns, search


def test_real_five_percent_gain_with_one_percent_noise_is_promoted() -> None:
    promoted = 0
    for s in range(40):
        noise, _, reruns, search = _campaign(s, 1.05, 0.01)
        promoted += decide_promotion(reruns, noise, search).candidate is not None
    assert promoted >= 36  # ~97% in a 200-seed run


def test_half_percent_gain_is_not_promoted_on_gpu_class_noise() -> None:
    for sigma in (0.0009, 0.0024, 0.01):
        for s in range(20):
            noise, _, reruns, search = _campaign(s, 1.005, sigma)
            assert decide_promotion(reruns, noise, search).candidate is None


def test_candidate_repeats_that_moved_widen_the_bound() -> None:
    """A compiled configuration moved by 0.56% and 1.0% between its search run and its re-runs: that spread
    is pooled with the reference runs, so a gain the reference runs alone would promote is not promoted."""
    rng = np.random.default_rng(0)
    noise = calibrate([np.exp(math.log(STEP) + rng.normal(0, 0.002, 80)) for _ in range(2)])  # two quiet references
    a, b = Candidate.from_dict({"compile": True}), Candidate.from_dict({"compile": True, "mb": 32})
    gain = 1.012
    ref = STEP
    reruns = {a: [(ref, ref / gain)], b: [(ref, ref / 1.001)]}
    alone, ev_alone = decide_promotion_detailed(reruns, noise)  # no search repeats known
    assert alone.candidate == a  # 1.2% > margin of the quiet references (floor 0.5% -> 1.005%)
    search = {a: [ref / gain * math.exp(-0.0056)], b: [ref / 1.001 * math.exp(-0.010)]}
    promo, ev = decide_promotion_detailed(reruns, noise, search)
    assert promo.candidate is None, promo.reason
    assert ev.bound is not None and ev_alone.bound is not None
    assert ev.bound.sigma_bound > ev_alone.bound.sigma_bound
    assert ev.bound.sources[CANDIDATE_REPEATS] == 4 and ev.bound.sources[REFERENCE_RERUNS] == 2
    assert ev.bound.n_runs == ev_alone.bound.n_runs + 2
    d = ev.to_dict()
    assert d["noise"]["sigma_bound"] == ev.bound.sigma_bound and d["candidates"][a.signature]["pairs"] == 1
    # the L5 gate on the same pairs and margin says the same
    (r, c), = reruns[a]
    assert speed_reproduces([r], [c], ev.margin).status == "fail"
    assert speed_reproduces([r], [c], ev_alone.margin).status == "pass"


def test_search_evidence_keeps_ok_runs_only() -> None:
    a = Candidate.from_dict({"x": 1})
    hist = [(a, Outcome(status="ok", step_time_s=0.1)), (a, Outcome(status="oom")),
            (a, Outcome(status="ok", step_time_s=0.11))]
    assert search_evidence(hist) == {a: [0.1, 0.11]}


def test_a_fixed_margin_still_works() -> None:
    a = Candidate.from_dict({"x": 1})
    assert decide_promotion({a: [(1.0, 0.9)]}, 0.02).candidate == a
    assert decide_promotion({a: [(1.0, 0.99)]}, 0.02).candidate is None
    assert decide_promotion({}, 0.02).speedup == 1.0
