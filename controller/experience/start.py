"""The experience start (issue 13, item 3): the best observation of the best-ranked source campaign, mapped onto the
target's knobs, with the memory it was measured to take as one bundle.

Settings of mechanisms the record does not cover stay at the reference; in ``filtered`` mode also settings whose
evidence does not say they help: a covered effect in the bank, or, for a setting the bank holds no effect of (it
rode along in every run that had it), the target's own stated prior.  The search
(``controller/search/proposals.initial_starts``) runs it as the first of its three starts, adding memory savers
when the bundle's measured peak would not fit here.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from infrarsi.controller.experience.records import Environment, Observation
from infrarsi.controller.experience.retrieval import (COVERAGE_RANK, Mode, TargetKnob, _obs_ok, _obs_scope, distance,
                                                      nonref_settings, scope, target_setting)


def first_start(observations: Iterable[Observation], environments: Mapping[str, Environment],
                target: Environment, knobs: Sequence[TargetKnob], mode: Mode = "filtered",
                evidence: Mapping[tuple[str, Any], float] | None = None) -> dict[str, Any] | None:
    """The experience start: ``{"config": {knob: value}, "speedup": x, "campaign": label}`` or None.

    Source campaigns are ranked by their environment (framework-compatible only in ``filtered``: covered for
    kernel mechanisms first, then distance); the fastest accepted observation of the best one is mapped onto the
    target's knobs, each mechanism only where the record covers it (``all``: every mechanism), others at the
    reference.  With ``evidence`` ((knob, value) -> retrieved prior mean of a covered effect, else the target's
    stated prior for a setting with no effect record; ``filtered`` only) a setting is also kept only when its
    evidence is positive: a setting that merely rode along in the best observation (never measured apart) is
    carried to other hardware only where the target's own prior favours it.  ``speedup`` is against that
    campaign's reference observation when it has one, else 1.
    """
    by_campaign: dict[str, list[Observation]] = {}
    for o in observations:
        by_campaign.setdefault(o.campaign, []).append(o)
    ranked = []
    for camp, obs in by_campaign.items():
        env = environments.get(obs[0].environment)
        if mode == "filtered":
            if env is None or scope(env, target, "kernel") == "incompatible":
                continue
            key = (-COVERAGE_RANK[scope(env, target, "kernel")], distance(env, target), camp)
        else:
            key = (0, 0.0, camp)
        ok = [o for o in obs if _obs_ok(o)]
        if ok:
            ranked.append((key, camp, env, ok))
    if not ranked:
        return None
    ranked.sort(key=lambda t: t[0])
    _, camp, env, ok = ranked[0]
    best = min(ok, key=lambda o: (o.step_time_s, o.trial))
    config: dict[str, Any] = {}
    for k in knobs:
        value = k.reference
        if k.mechanism and k.mechanism in best.canonical and \
                _obs_scope(best, env, target, mode, k.mechanism) == "covered":
            v = k.value_for(str(best.canonical[k.mechanism]))
            value = k.reference if v is None else v
        if mode == "filtered" and evidence is not None and value != k.reference and \
                evidence.get((k.name, value), 0.0) <= 0.0:
            value = k.reference
        config[k.name] = value
    if all(config[k.name] == k.reference for k in knobs):
        return None
    # reference runs: every mechanism they name at the environment's reference state
    ref_obs = [o for o in ok if o is not best and env is not None and o.canonical and all(
        m in env.reference_state and str(env.reference_state[m]) == str(v) for m, v in o.canonical.items())]
    refs = sorted(float(o.step_time_s) for o in ref_obs)
    ref_time = refs[len(refs) // 2] if refs else None
    speedup = float(ref_time / best.step_time_s) if ref_time else 1.0
    out: dict[str, Any] = {"config": config, "speedup": speedup, "campaign": camp}
    mem = _bundle_mem(best, ref_obs, env, config, knobs)
    if mem is not None:
        out["mem_delta_gib"], out["mem_dropped"] = mem
    return out


def _bundle_mem(best: Observation, refs: Sequence[Observation], env: Environment | None,
                config: Mapping[str, Any], knobs: Sequence[TargetKnob]) -> tuple[float, list[list[Any]]] | None:
    """``(delta, dropped)``: the peak memory of ``best`` minus its campaign's median reference peak (GiB), measured
    as one bundle, and the target settings ``[knob, value]`` of that observation the start leaves out; None when
    a peak is missing or a non-reference mechanism of the observation maps onto no target setting.

    Per-setting memory priors add up what each setting was measured to cost apart; the bundle's delta also holds
    what its settings do together (micro-batch times activation memory), which decides whether the start fits.
    The search subtracts its own estimates of the dropped settings."""
    if best.peak_mem_gib is None or env is None:
        return None
    peaks = sorted(float(o.peak_mem_gib) for o in refs if o.peak_mem_gib is not None)
    if not peaks:
        return None
    by_mech = {k.mechanism: k for k in knobs if k.mechanism}
    carried: set[str] = set()
    dropped: list[list[Any]] = []
    for mech, canon in sorted(nonref_settings(best, env)):
        got = target_setting(by_mech, mech, canon)
        if got is None:
            return None
        if config.get(got[0]) == got[1]:
            carried.add(got[0])
        else:
            dropped.append([got[0], got[1]])
    if carried != {k.name for k in knobs if config.get(k.name, k.reference) != k.reference}:
        return None
    return float(best.peak_mem_gib) - peaks[len(peaks) // 2], dropped


__all__ = ["first_start"]
