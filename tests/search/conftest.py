"""Fixtures for the search tests: a calibrated noise model and a small toy space with a simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infrarsi.controller.search.space import Candidate, KnobSpec, Outcome, SearchSpace
from infrarsi.surrogate.noise import calibrate


def make_noise(sigma_step: float = 0.002, seed: int = 0):
    """A real NoiseModel calibrated from synthetic reference runs."""
    rng = np.random.default_rng(seed)
    return calibrate([1.0 * np.exp(rng.normal(0, sigma_step, 40)) for _ in range(3)])


@pytest.fixture
def noise():
    return make_noise()


def toy_space(**kw) -> SearchSpace:
    """Four knobs: a big lever rated well, a spender, a saver, and a sub-gate knob; two patches."""
    knobs = (
        KnobSpec("compile", (False, True), False, prior_mean={True: 0.10}),
        KnobSpec("recompute", ("full", "none"), "full", prior_mean={"none": 0.15}, mem_prior_gib={"none": 20.0}),
        KnobSpec("fused_ce", (True, False), True, prior_mean={False: -0.01}, prior_sd=0.01,
                 mem_prior_gib={False: -12.0}),
        KnobSpec("workers", (2, 4, 8), 2, ordered=True, prior_mean={4: 0.005, 8: 0.005}),
        KnobSpec("algo", ("auto", "tree"), "auto", prior_mean={"tree": -0.03}, prior_sd=0.08),
    )
    return SearchSpace(knobs, kw.get("patches", ("p1", "p2")), kw.get("is_legal"))


TRUE = {("compile", True): 0.10, ("recompute", "none"): 0.20, ("fused_ce", False): -0.01,
        ("workers", 4): 0.004, ("workers", 8): 0.002, ("algo", "tree"): 0.12}
MEM = {("recompute", "none"): 20.0, ("fused_ce", False): -12.0}


def toy_evaluate(cand: Candidate, capacity: float = 80.0, ref_mem: float = 70.0, crash_pair=None) -> Outcome:
    """Deterministic toy truth: additive log-speedups, additive memory, optional crashing pair."""
    d = cand.as_dict()
    if crash_pair and all(d.get(k) == v for k, v in crash_pair):
        return Outcome("crash", reason="conflict", gpu_hours=0.01)
    mem = ref_mem + sum(MEM.get((k, v), 0.0) for k, v in d.items())
    if mem > capacity:
        return Outcome("oom", requested_gib=mem, capacity_gib=capacity, gpu_hours=0.01)
    y = sum(TRUE.get((k, v), 0.0) for k, v in d.items()) + (0.006 if "p1" in cand.patches else 0) \
        + (0.007 if "p2" in cand.patches else 0)
    return Outcome("ok", step_time_s=1.0 * math.exp(-y), peak_mem_gib=mem, gpu_hours=0.1)


def max_share(ledger, settings) -> float:
    """The largest share of any crash record's open suspect tuples that ``settings`` holds (0 with none)."""
    return max(ledger.shares(frozenset(settings)), default=0.0)
