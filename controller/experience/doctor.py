"""What ``doctor`` freezes from the experience bank for one campaign (the engine's ``_experience_snapshot``).

Contract: :func:`doctor_experience` reads the store once (effects of the contract's mechanisms in its framework,
the observations of their source campaigns, their environments), retrieves in ``filtered`` mode through
:func:`infrarsi.controller.experience.retrieval.search_experience` against this campaign's environment
(:func:`.environment.campaign_environment`), and returns JSON-able records for the doctor record:

- ``experience``: the records the search controller takes (experience start, per-setting priors with SDs and
  memory priors, known conflicts), frozen so that replaying the search stays deterministic while other
  campaigns write experience back;
- ``experience_coverage``: ``{"knobs": [searched knobs with a covered or partial record], "of": searched knobs,
  "grades": {knob: covered|partial|unobserved|null}}``;
- ``experience_environment``: the environment the campaign's own write-back will file its records under.

Knobs map onto mechanisms as the write-back files them (:func:`.environment.knob_mechanisms`: the catalog, else
the knob name), so a second campaign of the same contract meets the first one's records even for knobs the
catalog does not know.  Derived knobs are not searched and get no grade.
"""

from __future__ import annotations

from typing import Any, Mapping

from infrarsi.controller.experience.environment import campaign_environment, knob_mechanisms
from infrarsi.controller.experience.mechanisms import mechanism_class
from infrarsi.controller.experience.retrieval import TargetKnob, search_experience

#: the prior SD of a stated knob prior without a spread (the search's default_prior_sd)
DEFAULT_PRIOR_SD = 0.10


def contract_target_knobs(contract: Any) -> tuple[TargetKnob, ...]:
    """The searched (not derived) knobs of ``contract`` as retrieval targets."""
    mech = knob_mechanisms(contract)
    out = []
    for k in contract.knobs:
        if k.name in contract.derived_knobs:
            continue
        m, canon = mech[k.name]
        out.append(TargetKnob(name=k.name, values=tuple(k.values), reference=k.reference, mechanism=m,
                              klass=mechanism_class(m), canonical=dict(canon)))
    return tuple(out)


def doctor_experience(store: Any, contract: Any, header_extra: Mapping[str, Any] | None = None,
                      versions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The doctor's experience snapshot (see the module docstring)."""
    env = campaign_environment(contract, header_extra, versions)
    knobs = contract_target_knobs(contract)
    mechs = sorted({k.mechanism for k in knobs if k.mechanism})
    effects = store.effects(mechanisms=mechs, framework=env.framework) if mechs else []
    observations = []
    for camp in sorted({e.campaign for e in effects}):
        observations += store.experience_observations(campaign=camp)
    envs = store.environments(sorted({o.environment for o in observations} | {e.environment for e in effects}))
    base = {}
    for k in contract.knobs:
        for p in getattr(k, "priors", None) or []:
            base[(k.name, p.value)] = (float(p.log_speedup), float(p.spread or DEFAULT_PRIOR_SD))
    records, grades = search_experience(effects, observations, envs, env, knobs, base=base, mode="filtered",
                                        default_sd=DEFAULT_PRIOR_SD)
    covered = sorted(n for n, g in grades.items() if g in ("covered", "partial"))
    coverage: dict[str, Any] = {"knobs": covered, "of": len(knobs), "grades": dict(sorted(grades.items()))}
    pooled = pooled_values(contract)
    if pooled:
        coverage["pooled"] = pooled
    return {"experience": records, "experience_coverage": coverage, "experience_environment": env.to_dict()}


def pooled_values(contract: Any) -> list[str]:
    """One line per pair of values of one knob that the bank files under one canonical value (``knob: a and b
    are both mechanism=value``), the warning ``contract check`` gives; ``doctor`` and REPORT.md repeat it beside
    the coverage, since such a knob's records (read and written) pool both states."""
    from infrarsi.controller.contract.checks import canonical_collisions

    out = []
    for k in contract.knobs:
        for mech, canon, a, b in canonical_collisions(k.name, k.mechanism, list(k.values), k.canonical):
            out.append(f"{k.name}: {a!s} and {b!s} are both {mech}={canon}")
    return out


def carried_rules(records: Any) -> list[str]:
    """The hard and soft rules the frozen ``experience`` records carry into the search, one line each, for
    ``doctor`` and REPORT.md: known conflicts (``a=x & b=y: known conflict``), suspects (``...: suspected
    conflict``) and requirements (``a=x needs b=y``)."""
    def key(s: Any) -> str:
        name, value = s
        return f"{name}={value}"

    out = []
    for r in records or ():
        if not isinstance(r, dict):
            continue
        if "conflict" in r:
            out.append(" & ".join(key(s) for s in r["conflict"]) + ": known conflict")
        elif "suspect" in r:
            out.append(" & ".join(key(s) for s in r["suspect"]) + ": suspected conflict")
        elif "requires" in r:
            out.append(f"{key(r['requires'][0])} needs {key(r['requires'][1])}")
    return out


__all__ = ["contract_target_knobs", "doctor_experience", "carried_rules", "pooled_values"]
