"""Unit-level: the campaign's promotion decision and its L5 gate rest on one statistic and cannot disagree."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from infrarsi.controller.campaign.promotion import decide
from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.space import Candidate, KnobSpec, SearchSpace
from infrarsi.controller.store.records import ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import PlanCandidate
from infrarsi.surrogate.noise import calibrate
from infrarsi.verifier.invariants import speed_reproduces


def _ctrl(seed: int = 0) -> SearchController:
    rng = np.random.default_rng(seed)
    noise = calibrate([0.1 * np.exp(rng.normal(0, 0.002, 60)) for _ in range(3)])
    space = SearchSpace((KnobSpec("compile", (False, True), False), KnobSpec("mb", (8, 16), 8)), (), None)
    return SearchController(space, noise, 0.1, 80.0)


def _trial(i: int, group: str, outcome: str = "ok") -> TrialRecord:
    return TrialRecord(id=i, campaign_id=1, seq=i, trial_key=f"k{i}", stage="promotion", config={}, patches=[],
                       signature="s", group_key=group, status="ingested", outcome=outcome, reason=None,
                       executor="local", job_id=None, submit_time=None, start_time=None, end_time=None, gpus=1,
                       partition=None, attempt=0, outdir="/nonexistent")


def _obs(i: int, t: float) -> ObservationRecord:
    return ObservationRecord(id=i, trial_id=i, step_time_s=t, peak_mem_gib=None, censor_kind="exact",
                             oom_shortfall_gib=None, loss_window_mean=None, accepted=True, first_failed_layer=None,
                             details={})


def _evidence(pairs: dict[Candidate, list[tuple[float, float]]]) -> tuple[list[dict[str, Any]], list, dict]:
    plan, done, obs, i = [], [], {}, 0
    for cand, ps in pairs.items():
        plan.append(PlanCandidate(config=cand.as_dict(), patches=[], signature=cand.signature))
        for j, (r, c) in enumerate(ps):
            group = f"{cand.signature[:16]}:{j}"
            for t in (r, c):
                i += 1
                done.append(_trial(i, group))
                obs[i] = _obs(i, t)
    return plan, done, obs


def test_old_code_disagreed_new_code_cannot() -> None:
    """Ratio of means (old L5) 1.034x vs geometric mean of ratios (old promotion) 1.039x around a 3.6% margin:
    the old engine promoted, then L5 vetoed.  Now one function decides both, with the pooled bound."""
    ref, cand = [0.1, 0.1, 0.1], [0.09, 0.09, 0.11]
    old_margin = 0.036
    assert math.exp(sum(math.log(r / c) for r, c in zip(ref, cand)) / 3) - 1 > old_margin
    assert sum(ref) / sum(cand) - 1 <= old_margin
    a = Candidate.from_dict({"compile": True, "mb": 8})
    promo, details = decide(_ctrl(), *_evidence({a: list(zip(ref, cand))}))
    gate = speed_reproduces(ref, cand, details["promotion_margin"])
    assert (promo.candidate is not None) == (gate.status == "pass")
    # the candidate's own repeats (0.09 vs 0.11) are evidence of noise: the bound widened, nothing promoted
    assert promo.candidate is None and details["noise"]["sources"]["candidate repeats"] == 3
    assert details["noise"]["sigma_bound"] > _ctrl().noise.sigma_pair_bound
    assert "exp(mean over back-to-back pairs" in details["statistic"]


def test_promotion_and_gate_agree_on_random_evidence() -> None:
    rng = random.Random(7)
    a, b = Candidate.from_dict({"compile": True, "mb": 8}), Candidate.from_dict({"compile": True, "mb": 16})
    promoted = 0
    for _ in range(60):
        ev = {}
        for cand in (a, b):
            gain, noise = rng.choice([1.0, 1.02, 1.05, 1.3]), rng.choice([0.001, 0.01, 0.05])
            ev[cand] = [(0.1 * math.exp(rng.gauss(0, noise)), 0.1 / gain * math.exp(rng.gauss(0, noise)))
                        for _ in range(rng.choice([1, 2, 3]))]
        promo, details = decide(_ctrl(), *_evidence(ev))
        m = details["promotion_margin"]
        for cand, ps in ev.items():
            item = speed_reproduces([r for r, _ in ps], [c for _, c in ps], m)
            if promo.candidate == cand:
                assert item.status == "pass" and details["speed_reproduces"]["status"] == "pass"
                promoted += 1
            elif item.status == "pass":  # cleared too, but the other candidate was faster
                assert promo.candidate is not None and promo.speedup >= details["candidates"][cand.signature]["speedup"]
        assert not promo.reason.startswith("L5")  # the gate never vetoes a decision of the same function
        if promo.candidate is not None:
            lo, hi = details["candidates"][promo.candidate.signature]["interval"]
            assert lo < promo.speedup < hi
    assert promoted >= 10


def test_a_failed_rerun_is_not_a_pair() -> None:
    a = Candidate.from_dict({"compile": True, "mb": 8})
    plan, done, obs = _evidence({a: [(0.1, 0.05), (0.1, 0.05)]})
    done[3] = _trial(4, done[3].group_key or "", outcome="rejected")
    promo, details = decide(_ctrl(), plan, done, obs)
    assert details["candidates"][a.signature]["pairs"] == 1
    assert promo.candidate == a
