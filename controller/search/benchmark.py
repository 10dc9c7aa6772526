"""The search benchmark: every strategy, R seeded repeats, one landscape.

Per repeat (seed s): the same noisy world for every strategy (evaluation rng
seeded from s); a doctor stage of ``DOCTOR_RUNS`` reference runs calibrates
the noise model and the reference step time; then :func:`run_search` with the
strategy; then scoring against the noise-free truth.

Scoring:
* wall hours to 90: simulated wall-clock hours until that trial's outcome is
  known, the doctor's reference runs included (they share the slots:
  ``ceil(DOCTOR_RUNS / slots)`` reference durations).  A trial lasts its GPU
  hours divided by the landscape's ``GPUS`` (overhead + updates x step time;
  failures end early).  ``q`` = synchronous rounds of q trials, ``slots`` =
  asynchronous with that many trials running.
* trials-to-90: the first trial after which the strategy's best verified
  candidate (``best()``) has a noise-free log-speedup >= 0.9 * ln(peak);
  None if never.  GPU hours to 90 include the doctor runs.
* final speedup: the promoted candidate's noise-free speedup (1.0 when the
  reference is kept; 1.0 too when the promoted candidate is numerically
  rejected, which also counts as a false promotion).
* false promotion: a promoted candidate truly slower than the reference or
  numerically rejected.
* ooms / crashes: totals over all repeats (rejections count as crashes).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from infrarsi.controller.search.landscape import Landscape
from infrarsi.controller.search.runner import run_search
from infrarsi.controller.search.strategies import DEFAULT_STRATEGIES, make_strategy
from infrarsi.surrogate.noise import calibrate

DOCTOR_RUNS = 3


@dataclass
class RepeatScore:
    trials_to_90: int | None
    gpu_hours_to_90: float | None
    wall_hours_to_90: float | None
    final_speedup: float
    false_promotion: bool
    ooms: int
    crashes: int


@dataclass
class SimulatedCampaign:
    """One simulated campaign on a landscape: the doctor's calibration and the search with its promotion."""

    noise: Any
    t0: float
    reference_peak_mem_gib: float | None
    doctor_gpu_hours: float
    doctor_wall_hours: float
    result: Any  # runner.SearchResult


def simulate_campaign(land: Landscape, strategy: str, seed: int, trials: int, q: int = 1, slots: int | None = None,
                      priors: str | None = None, experience: list[dict] | None = None) -> SimulatedCampaign:
    """Doctor (``DOCTOR_RUNS`` noisy reference runs) and one seeded search of ``strategy`` with its promotion.

    ``slots`` set: asynchronous search with that many concurrent trials (``q`` ignored).  ``priors`` set
    (``none``/``calibrated``/``miscalibrated``, infrarsi strategies only): the knob, memory and patch priors
    come from the simulated proposer of :mod:`infrarsi.controller.search.simulated_proposer` instead of the
    landscape's stated ones.  ``experience`` (infrarsi strategies only): records for
    ``SearchController(experience=...)``, e.g. from :mod:`infrarsi.controller.experience.retrieval`.
    """
    rng = np.random.default_rng([seed, 20261129])
    evaluate = land.evaluator(rng)
    ref = land.space.reference()
    runs, mems, hours = [], [], 0.0
    doctor_wall = 0.0
    for _ in range(DOCTOR_RUNS):
        res = land.raw(ref, rng)
        steps = res.get("step_times") or [float(res["step_time_s"])] * 8
        runs.append(np.asarray(steps, dtype=float))
        if res.get("peak_mem_gib") is not None:
            mems.append(float(res["peak_mem_gib"]))
        hours += land.to_outcome(res).gpu_hours
        doctor_wall = max(doctor_wall, land.to_outcome(res).gpu_hours / land.gpus)
    width = slots if slots is not None else q
    doctor_wall *= math.ceil(DOCTOR_RUNS / width)
    noise = calibrate(runs)
    t0 = float(np.exp(np.mean([np.mean(np.log(r)) for r in runs])))
    ref_mem = float(np.mean(mems)) if mems else None
    kwargs: dict[str, Any] = {}
    space = land.space
    if strategy.startswith("infrarsi"):
        kwargs["reference_peak_mem_gib"] = ref_mem
        if experience:
            kwargs["experience"] = list(experience)
        if priors is not None:
            from infrarsi.controller.search.simulated_proposer import simulated_priors

            space, claims = simulated_priors(land, priors, seed)
            if claims is not None:
                kwargs["patch_priors"] = claims
        elif hasattr(land.module, "PATCH_PRIORS"):
            kwargs["patch_priors"] = dict(land.module.PATCH_PRIORS)
    strat = make_strategy(strategy, space, noise, t0, land.capacity_gib, seed=seed, parallel=width > 1, **kwargs)
    result = run_search(land.space, evaluate, trials, q, strategy=strat, slots=slots,
                        duration=lambda _c, o: o.gpu_hours / land.gpus)
    return SimulatedCampaign(noise, t0, ref_mem, hours, doctor_wall, result)


def score_campaign(land: Landscape, camp: SimulatedCampaign, peak: float) -> RepeatScore:
    """Score a simulated campaign against the landscape's noise-free truth (see the module docstring)."""
    result = camp.result
    target = 0.9 * math.log(peak) if peak > 1.0 else 0.0
    t90 = h90 = w90 = None
    cum = camp.doctor_gpu_hours
    for i, ((_, o), best, wall) in enumerate(zip(result.trials, result.best_after, result.wall_after)):
        cum += o.gpu_hours
        sp = land.true_speedup(best) if best is not None else None
        if sp is not None and math.log(sp) >= target:
            t90, h90, w90 = i + 1, cum, camp.doctor_wall_hours + wall
            break
    promoted = result.promotion.candidate
    final = land.true_speedup(promoted)
    false = promoted is not None and (final is None or final < 1.0)
    return RepeatScore(t90, h90, w90, 1.0 if final is None else final, false,
                       sum(o.status == "oom" for _, o in result.trials),
                       sum(o.status in ("crash", "rejected") for _, o in result.trials))


def run_repeat(land: Landscape, strategy: str, seed: int, trials: int, peak: float, q: int = 1,
               slots: int | None = None, priors: str | None = None,
               experience: list[dict] | None = None) -> RepeatScore:
    """One seeded search of one strategy on one landscape, scored against the truth (see
    :func:`simulate_campaign` for the arguments)."""
    return score_campaign(land, simulate_campaign(land, strategy, seed, trials, q, slots, priors, experience), peak)


def _median_or_none(xs: Sequence[float | None]) -> float | None:
    vals = sorted(math.inf if x is None else float(x) for x in xs)
    m = statistics.median(vals) if vals else math.inf
    return None if math.isinf(m) else m


def run_benchmark(land: Landscape, strategies: Sequence[str] = DEFAULT_STRATEGIES, trials: int = 30, repeats: int = 20,
                  q: int = 1, seed0: int = 0, slots: int | None = None,
                  priors: Sequence[str] = ()) -> dict:
    """The benchmark's JSON object (see ``bench/README.md``); ``slots`` runs it asynchronously.

    ``priors``: simulated-proposer prior modes; each infrarsi strategy then runs once per mode, reported as
    ``<strategy>+priors:<mode>`` (the other strategies use no priors and run once)."""
    peak = land.peak_speedup()
    out: dict[str, Any] = {"landscape": land.name, "peak_speedup": peak, "trials": trials, "repeats": repeats,
                           "q": q if slots is None else None, "slots": slots, "strategies": {}}
    runs: list[tuple[str, str, str | None]] = []
    for name in strategies:
        if priors and name.startswith("infrarsi"):
            runs += [(f"{name}+priors:{mode}", name, mode) for mode in priors]
        else:
            runs.append((name, name, None))
    for label, name, mode in runs:
        scores = [run_repeat(land, name, seed0 + r, trials, peak, q, slots, mode) for r in range(repeats)]
        out["strategies"][label] = {
            "median_trials_to_90": _median_or_none([s.trials_to_90 for s in scores]),
            "median_gpu_hours_to_90": _median_or_none([s.gpu_hours_to_90 for s in scores]),
            "median_wall_hours_to_90": _median_or_none([s.wall_hours_to_90 for s in scores]),
            "median_final_speedup": statistics.median(s.final_speedup for s in scores),
            "false_promotions": sum(s.false_promotion for s in scores),
            "ooms": sum(s.ooms for s in scores),
            "crashes": sum(s.crashes for s in scores),
        }
    return out
