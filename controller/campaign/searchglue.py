"""Bridge between stored trials and the search library (which never sees the store).

The search controller is rebuilt from immutable snapshots: the contract's knob table becomes a
:class:`SearchSpace`, the doctor's reference runs become a :class:`NoiseModel`, and every ingested search trial
is replayed with ``tell`` in ingestion order, so a restarted daemon proposes exactly what the old one would have.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from infrarsi.controller.contract.checks import is_legal
from infrarsi.controller.contract.model import Contract, Knob
from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.failures import told_failure
from infrarsi.controller.search.space import Candidate, KnobSpec, Outcome, SearchSpace
from infrarsi.controller.store.records import ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import Doctor, Scope
from infrarsi.surrogate.noise import calibrate


def search_space(contract: Contract, patches: Sequence[str],
                 proposed: Sequence[dict[str, Any]] | None = None) -> SearchSpace:
    """The searched knobs (derived knobs excluded; legality through the contract's couplings) and patches.

    ``proposed``: proposer priors frozen in the doctor record (``{"knob", "value", "mean", "spread",
    "mem_delta_gib"}``, see :mod:`infrarsi.controller.campaign.proposing`); they fill in values the contract's own
    priors leave open (the contract wins), and enter the same flooring and empirical-Bayes revision."""
    derived = contract.derived_knobs
    knobs = tuple(
        KnobSpec(name=k.name, values=tuple(k.values), reference=k.reference, ordered=k.kind == "ordered",
                 mechanism=k.mechanism, **_with_proposed(knob_priors(k), k.name, proposed or ()))
        for k in contract.knobs if k.name not in derived
    )
    return SearchSpace(knobs=knobs, patches=tuple(sorted(patches)), is_legal=lambda cfg: is_legal(contract, cfg))


def knob_priors(knob: Knob) -> dict[str, Any]:
    """The contract's ``priors`` of one knob as KnobSpec keywords: ``prior_mean`` and ``mem_prior_gib`` per value,
    ``prior_sd`` the largest spread stated (None where nothing is stated, so the controller's defaults apply)."""
    mean = {p.value: float(p.log_speedup) for p in knob.priors if p.log_speedup}
    mem = {p.value: float(p.memory_gib) for p in knob.priors if p.memory_gib is not None}
    spreads = [float(p.spread) for p in knob.priors if p.spread is not None]
    return {"prior_mean": mean or None, "prior_sd": max(spreads) if spreads else None, "mem_prior_gib": mem or None}


def _with_proposed(stated: dict[str, Any], knob: str, proposed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``stated`` (the contract's KnobSpec prior keywords) completed with proposer priors for ``knob``."""
    rows = [r for r in proposed if r.get("knob") == knob]
    if not rows:
        return stated
    mean = dict(stated["prior_mean"] or {})
    mem = dict(stated["mem_prior_gib"] or {})
    spreads = [stated["prior_sd"]] if stated["prior_sd"] is not None else []
    for r in rows:
        if r["value"] not in mean:
            mean[r["value"]] = float(r["mean"])
            spreads.append(float(r["spread"]))
        if r.get("mem_delta_gib") is not None and r["value"] not in mem:
            mem[r["value"]] = float(r["mem_delta_gib"])
    return {"prior_mean": mean or None, "prior_sd": max(spreads) if spreads else None, "mem_prior_gib": mem or None}


def patch_priors(scope: Scope) -> dict[str, float]:
    """Prior log-gain input per proposed patch (the proposer's claim, capped; the controller shrinks it by
    ``patch_kappa``), from the scope's ``patch_provenance``."""
    out = {}
    for name, p in scope.patch_provenance.items():
        if name in scope.patches and p.get("prior_input") is not None:
            out[name] = float(p["prior_input"])
    return out


def free_config(contract: Contract, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` restricted to searched knobs."""
    derived = contract.derived_knobs
    return {k: v for k, v in config.items() if k not in derived}


def candidate_of(trial: TrialRecord) -> Candidate:
    """The search candidate a trial ran."""
    return Candidate.from_dict(trial.config, trial.patches)


def outcome_of(trial: TrialRecord, obs: ObservationRecord | None, capacity_gib: float) -> Outcome:
    """The search's view of an ingested trial."""
    gpu_hours = 0.0
    if trial.outcome == "ok" and obs is not None and obs.step_time_s:
        return Outcome(status="ok", step_time_s=obs.step_time_s, peak_mem_gib=obs.peak_mem_gib, gpu_hours=gpu_hours)
    if trial.outcome == "oom":
        shortfall = (obs.oom_shortfall_gib if obs is not None else None) or 0.0
        return Outcome(status="oom", requested_gib=capacity_gib + shortfall, capacity_gib=capacity_gib,
                       reason=trial.reason or "")
    status, reason = told_failure(trial.outcome or "", trial.reason)
    return Outcome(status=status, reason=reason,
                   rejected_layer=obs.first_failed_layer if obs is not None and status == "rejected" else None)


def noise_from_doctor(doctor: Doctor) -> Any:
    """Recompute the NoiseModel from the stored per-run window step times (deterministic)."""
    runs = [np.asarray(r, dtype=float) for r in doctor.reference_window_times]
    return calibrate(runs)


def rebuild_controller(contract: Contract, scope: Scope, doctor: Doctor, seed: int,
                       trials: Sequence[TrialRecord], observations: dict[int, ObservationRecord],
                       experience: list[dict] | None = None) -> SearchController:
    """A SearchController with every ingested search trial told, in ingestion (observation id) order."""
    space = search_space(contract, list(scope.patches), doctor.proposer_priors)
    tuning: dict[str, Any] = {}
    if patch_priors(scope):
        tuning["patch_priors"] = patch_priors(scope)
    replaces = {n: list(p["replaces"]) for n, p in scope.patch_provenance.items()
                if p.get("replaces") and n in scope.patches}
    if replaces:
        tuning["patch_replaces"] = replaces
    if doctor.reference_peak_mem_gib is not None:
        tuning["reference_peak_mem_gib"] = float(doctor.reference_peak_mem_gib)
    ctrl = SearchController(space, noise_from_doctor(doctor), float(doctor.t0), contract.search_capacity_gib,
                            seed=seed, experience=experience, phase_shares=doctor.phase_shares, **tuning)
    # when each was proposed (a trial asked before the last improvement is no stall, stall_blind); in launch order,
    # so a candidate run twice keeps its first ask point whatever order ``trials`` comes in
    for t in sorted(trials, key=lambda t: t.seq):
        if t.stage == "search" and t.asked_after is not None:
            ctrl.asked_at.setdefault(candidate_of(t), t.asked_after)
    done = [t for t in trials if t.stage == "search" and t.status == "ingested" and t.outcome != "cancelled"]
    done.sort(key=lambda t: (observations[t.id].id if t.id in observations else 0, t.seq))
    for t in done:
        ctrl.tell(candidate_of(t), outcome_of(t, observations.get(t.id), contract.search_capacity_gib))
    return ctrl
