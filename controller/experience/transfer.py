"""``infrarsi bench transfer``: measured transfer of experience between two simulated landscapes (issue 13, item 5).

Per repeat (seed s):

1. **Source**: a full simulated campaign on the source landscape (doctor, cold search, promotion re-runs;
   :func:`infrarsi.controller.search.benchmark.simulate_campaign`) and verified write-back
   (:func:`campaign_records`) into a fresh bank, an in-memory store (:class:`MemoryStore`).
2. **Target**, once per mode, on the same seed: ``cold`` (an empty bank), ``bank-all`` (every record of a matching
   mechanism as a prior regardless of scope or distance: retrieval mode ``all``) and ``bank-filtered`` (the scope
   check, distance and ranking: retrieval mode ``filtered``).  The records reach the search as
   ``SearchController(experience=...)`` (:func:`.retrieval.search_experience`), exactly as a real campaign's
   doctor freezes them.
3. Scoring as ``infrarsi bench search`` (:func:`infrarsi.controller.search.benchmark.score_campaign`): trials and
   GPU hours until the best verified candidate reaches 90% of the target's peak log-speedup, the promoted
   candidate's noise-free speedup, and false promotions.

Write-back of a simulated campaign (:func:`campaign_records`) follows the real one's rules through the same
function, :func:`.evidence.evidence_effects`: one Observation per search trial (canonical mechanism values,
outcome, OOM shortfall, minimal conflict tuples and broken requirements from the search's failure attribution);
Effects only from the verified runs (the doctor's reference and the search trials that ran to the end and passed
the numerical check, patch-free): paired single-knob changes beyond the gate (``verified-search``), the promoted single-knob candidate
(``verified-rerun``) and the posterior-gated main effects of the time model for settings measured only inside
bundles (``verified-model``).

Landscapes declare ``ENVIRONMENT`` (the :class:`Environment` fields) and knobs their ``mechanism`` and
``canonical`` value map; a landscape without ``ENVIRONMENT`` is refused with a one-line error.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Sequence

from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.experience.evidence import Promoted, Run, evidence_effects
from infrarsi.controller.experience.mechanisms import value_key
from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.experience.retrieval import (TargetKnob, reference_state, search_experience,
                                                      target_knobs)
from infrarsi.controller.experience.writeback import broken_requirements
from infrarsi.controller.search.benchmark import SimulatedCampaign, _median_or_none, score_campaign, simulate_campaign
from infrarsi.controller.search.failures import FailureLedger
from infrarsi.controller.search.landscape import Landscape
from infrarsi.controller.search.space import Candidate, SearchSpace, Setting, settings_key

#: transfer modes and the retrieval mode each uses (None: no bank)
MODES: dict[str, str | None] = {"cold": None, "bank-all": "all", "bank-filtered": "filtered"}


def landscape_environment(land: Landscape, knobs: Sequence[TargetKnob]) -> Environment:
    """The landscape's ``ENVIRONMENT`` as an :class:`Environment`, its reference state from the knobs."""
    raw = getattr(land.module, "ENVIRONMENT", None)
    if not isinstance(raw, dict) or "gpu_sku" not in raw:
        raise InfrarsiError(f"{land.path}: bench transfer needs an ENVIRONMENT dict with at least gpu_sku")
    try:
        env = Environment.from_dict(dict(raw))
    except (TypeError, ValueError) as exc:
        raise InfrarsiError(f"{land.path}: ENVIRONMENT: {exc}") from exc
    return replace(env, reference_state={**reference_state(knobs), **env.reference_state})


def landscape_knobs(land: Landscape) -> tuple[TargetKnob, ...]:
    """The landscape's knobs normalized onto the catalog (its KNOBS dicts, ``mechanism`` and ``canonical``)."""
    return target_knobs(land.module.KNOBS)


def base_priors(space: SearchSpace, default_sd: float = 0.10) -> dict[tuple[str, Any], tuple[float, float]]:
    """Each non-reference knob setting's own prior (stated mean, stated SD or ``default_sd``)."""
    out = {}
    for k in space.knobs:
        sd = k.prior_sd if k.prior_sd is not None else default_sd
        for v in k.values:
            if v != k.reference:
                out[(k.name, v)] = (k.prior_of(v), sd)
    return out


def _canonical(knobs: Sequence[TargetKnob], config: dict[str, Any]) -> dict[str, str]:
    return {k.mechanism: k.canonical_of(config[k.name]) for k in knobs if k.mechanism and k.name in config}


def _search_conflicts(camp: SimulatedCampaign, space: SearchSpace) -> list[tuple[Setting, ...]]:
    """The minimal conflict tuples the search's own failure ledger ended with, as the real write-back takes them
    (:func:`.writeback.search_conflicts`): its ties are broken by the search's priors and experience.  A search
    without a ledger in its summary (a baseline strategy) gets one rebuilt from its trials, ties broken by name."""
    named = camp.result.summary.get("banned_tuples")
    if named is None:
        ledger = FailureLedger()
        for cand, o in camp.result.trials:
            ledger.record(cand.settings(space), o, lambda _s: 0.0)
        return [tuple(sorted(t, key=lambda s: (s[0], str(s[1])))) for t in ledger.banned]
    by_key = {settings_key(st): st for cand, _ in camp.result.trials for st in cand.settings(space)}
    return [tuple(sorted((by_key[k] for k in t), key=lambda s: (s[0], str(s[1]))))
            for t in named if all(k in by_key for k in t)]


def _search_requirements(camp: SimulatedCampaign, space: SearchSpace) -> list[tuple[Setting, Setting]]:
    """The requirements (``s`` needs ``r``) the search's own failure ledger ended with, as the real write-back
    takes them (:func:`.writeback.search_failures`); [] for a search without them (a baseline strategy)."""
    by_key = {settings_key(st): st for cand, _ in camp.result.trials for st in cand.settings(space)}
    return [(by_key[a], by_key[b]) for a, b in camp.result.summary.get("requirements") or ()
            if a in by_key and b in by_key]


def campaign_records(land: Landscape, camp: SimulatedCampaign, label: str) -> tuple[Environment, list[Observation],
                                                                                    list[Effect]]:
    """Verified write-back of one simulated campaign (see the module docstring)."""
    knobs = landscape_knobs(land)
    by_name = {k.name: k for k in knobs}
    env = landscape_environment(land, knobs)
    digest = env.digest()
    space = land.space
    ref = space.reference()
    gate = float(camp.noise.big_knob_gate)
    sigma = float(camp.noise.sigma_pair)
    banned = _search_conflicts(camp, space)
    needs = _search_requirements(camp, space)

    def canon(name: str, value: Any) -> tuple[str | None, str]:
        k = by_name.get(name)
        return (k.mechanism, k.canonical_of(value)) if k is not None else (None, "")
    observations: list[Observation] = []
    ok: list[tuple[Candidate, float, str, float | None]] = [(ref, camp.t0, "reference", camp.reference_peak_mem_gib)]
    for i, (cand, o) in enumerate(camp.result.trials):
        key = f"t{i:03d}"
        sets = cand.settings(space)
        conf = tuple(tuple((by_name[n].mechanism, by_name[n].canonical_of(v)) for n, v in t
                           if n in by_name and by_name[n].mechanism)
                     for t in banned if set(t) <= sets and o.status in ("crash", "rejected"))
        broken = broken_requirements(needs, {(n, value_key(v)) for n, v in cand.as_dict().items()}, canon) \
            if o.status in ("crash", "rejected") else ()
        shortfall = (o.requested_gib - o.capacity_gib) if o.status == "oom" and o.requested_gib and o.capacity_gib \
            else None
        observations.append(Observation(
            environment=digest, campaign=label, trial=key, config=cand.as_dict(),
            canonical=_canonical(knobs, cand.as_dict()), patches=tuple(sorted(cand.patches)),
            step_time_s=o.step_time_s if o.status == "ok" else None,
            peak_mem_gib=o.peak_mem_gib if o.status == "ok" else None,
            verdicts={"outcome": o.status}, oom_shortfall_gib=shortfall, conflicts=tuple(c for c in conf if c),
            requirements=broken))
        if o.status == "ok" and o.step_time_s and not cand.patches:
            ok.append((cand, float(o.step_time_s), key, o.peak_mem_gib))
    observations.insert(0, Observation(environment=digest, campaign=label, trial="reference",
                                       config=ref.as_dict(), canonical=_canonical(knobs, ref.as_dict()),
                                       step_time_s=camp.t0, peak_mem_gib=camp.reference_peak_mem_gib,
                                       verdicts={"outcome": "ok"}))
    runs = [Run(trial=key, config=cand.as_dict(), step_time_s=t, peak_mem_gib=mem) for cand, t, key, mem in ok]
    promo = camp.result.promotion
    promoted = None
    if promo.candidate is not None and not promo.candidate.patches and promo.speedup > 0:
        sets = list(promo.candidate.settings(space))
        if len(sets) == 1:
            (name, v), = sets
            promoted = Promoted(name, v, float(promo.speedup))
    effects = evidence_effects(knobs, runs, env, label, gate, sigma, promoted)
    return env, observations, effects


def source_experience(source: Landscape, target: Landscape, seed: int, trials: int,
                      modes: Sequence[str] = tuple(MODES)) -> dict[str, tuple[list[dict], dict[str, str]]]:
    """Step 1 and the retrieval of step 2 for one seed: a fresh bank written back from the source campaign, and per
    mode the records the target's ``SearchController(experience=...)`` gets with the coverage grade of every
    knob (``([], {})`` for ``cold``)."""
    from infrarsi.controller.store.memory import MemoryStore

    tknobs = landscape_knobs(target)
    tenv = landscape_environment(target, tknobs)
    base = base_priors(target.space)
    bank = MemoryStore()
    src = simulate_campaign(source, "infrarsi", seed, trials)
    env, obs, effs = campaign_records(source, src, f"source-{seed}")
    bank.add_environment(env)
    bank.add_observations(obs)
    bank.add_effects(effs)
    stored_effects, stored_obs, envs = bank.effects(), bank.experience_observations(), bank.environments()
    out: dict[str, tuple[list[dict], dict[str, str]]] = {}
    for m in modes:
        mode = MODES[m]
        if mode is None:
            out[m] = ([], {})
        else:
            exp, g = search_experience(stored_effects, stored_obs, envs, tenv, tknobs, base, mode)
            out[m] = (exp, dict(g))
    return out


def run_transfer(source: Landscape, target: Landscape, modes: Sequence[str] = tuple(MODES), trials: int = 30,
                 repeats: int = 10, seed0: int = 0, source_trials: int | None = None) -> dict[str, Any]:
    """The transfer benchmark's JSON object (see ``bench/README.md``)."""
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise InfrarsiError(f"--modes: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(MODES)}")
    peak = target.peak_speedup()
    landscape_environment(target, landscape_knobs(target))  # refuse a target without ENVIRONMENT before any work
    scores: dict[str, list[Any]] = {m: [] for m in modes}
    records: dict[str, list[int]] = {m: [] for m in modes}
    grades: dict[str, dict[str, str]] = {}
    for r in range(repeats):
        seed = seed0 + r
        experience = source_experience(source, target, seed, source_trials or trials, modes)
        for m in modes:
            exp, g = experience[m]
            if MODES[m] is not None and r == 0:
                grades[m] = dict(g)
            camp = simulate_campaign(target, "infrarsi", seed, trials, experience=exp)
            scores[m].append(score_campaign(target, camp, peak))
            records[m].append(len(exp))
    out: dict[str, Any] = {"source": source.name, "target": target.name, "peak_speedup": peak, "trials": trials,
                           "repeats": repeats, "modes": {}}
    for m in modes:
        s = scores[m]
        out["modes"][m] = {
            "median_trials_to_90": _median_or_none([x.trials_to_90 for x in s]),
            "median_gpu_hours_to_90": _median_or_none([x.gpu_hours_to_90 for x in s]),
            "median_final_speedup": statistics.median(x.final_speedup for x in s),
            "false_promotions": sum(x.false_promotion for x in s),
            "median_records": statistics.median(records[m]),
        }
        if m in grades:
            out["modes"][m]["coverage_first_repeat"] = grades[m]
    return out


__all__ = ["MODES", "landscape_environment", "landscape_knobs", "base_priors", "campaign_records",
           "source_experience", "run_transfer"]
