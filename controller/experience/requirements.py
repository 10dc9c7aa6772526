"""Retrieval of "needs a partner" crash explanations (issue 13): which requirements another campaign found carry
to the target as known requirements for the search.

A source campaign's failure ledger keeps a requirement ``s`` needs ``r`` in place of a conflict tuple when ``s``
crashed without ``r`` more often than any tuple explains (``controller/search/failures.py``); write-back stores it
on each crashed observation that broke it (:attr:`~.records.Observation.requirements`).  A known requirement is a
hard rule in the target's search (``s`` runs only beside ``r``), so in ``filtered`` mode it is carried only when
pinned down:

- both mechanisms are covered by the observation, scoped as a crash conflict is
  (:func:`.retrieval.conflicts`): a kernel combination's crash is the software's, not the SKU's, so FP8 counts as
  an ordinary kernel mechanism here; a balance mechanism needs the same SKU, nodes, fabric and layout;
- the source pinned it down: some crashed observation that broke it has no other explanation left in its
  campaign: every one of its non-reference settings and every pair of them also ran in a passing observation of
  that campaign (no conflict tuple of one or two settings explains it), and no other "needs a partner" hypothesis
  fits it (another setting of the crash whose every passing run held a partner the crash lacks).  The ledger keeps
  a requirement when it explains more crashes than a tuple does, which can be a guess: a crash of sequence
  parallelism at TP1 beside micro-batch 4 reads as "micro-batch 4 needs the 500 MB bucket" when every passing
  micro-batch-4 run had it, and carried as a rule it would keep micro-batch 4 from every other bucket;
- no passing observation of a framework-compatible campaign holds ``s`` without ``r`` (that run refutes it);
- both map onto non-reference values of target knobs (:func:`.retrieval.TargetKnob.value_for`).

``all`` (the unfiltered baseline) carries every requirement that maps onto target knobs.  Pure: no store.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping, Sequence

from infrarsi.controller.experience.mechanisms import mechanism_class, value_key
from infrarsi.controller.experience.records import Environment, Observation
from infrarsi.controller.experience.retrieval import (Mode, TargetKnob, nonref_settings, partner_hypotheses, passed,
                                                      scope, target_setting)

Requirement = tuple[tuple[str, str], tuple[str, str]]


def _refuted(req: Requirement, observations: Sequence[Observation], environments: Mapping[str, Environment],
             target: Environment) -> bool:
    """Whether a passing, framework-compatible observation holds the setting without its partner."""
    (ms, vs), (mr, vr) = req
    for o in observations:
        env = environments.get(o.environment)
        if env is None or scope(env, target, "kernel") == "incompatible" or not passed(o):
            continue
        if str(o.canonical.get(ms)) == vs and str(o.canonical.get(mr)) != vr:
            return True
    return False


def _pinned(req: Requirement, by_camp: Mapping[str, Sequence[Observation]],
            environments: Mapping[str, Environment]) -> bool:
    """Whether some crashed observation breaking ``req`` (``by_camp``: observations per campaign) has every
    non-reference setting and every pair of them in a passing observation of its own campaign (no conflict tuple
    of one or two settings explains it) and no "needs a partner" hypothesis but ``req``'s
    (:func:`.retrieval.partner_hypotheses`)."""
    for obs in by_camp.values():
        broke = [o for o in obs if req in o.requirements]
        if not broke:
            continue
        passing = [nonref_settings(o, environments.get(o.environment)) for o in obs if passed(o)]
        for o in broke:
            sets = nonref_settings(o, environments.get(o.environment))
            if all(any(set(c) <= p for p in passing)
                   for n in (1, 2) for c in itertools.combinations(sorted(sets), n)) \
                    and partner_hypotheses(sets, passing) == {(req[0], req[1][0])}:
                return True
    return False


def requirements(observations: Iterable[Observation], environments: Mapping[str, Environment], target: Environment,
                 knobs: Sequence[TargetKnob], mode: Mode = "filtered") -> list[dict[str, Any]]:
    """Known requirements for the search, ``{"requires": [[knob, value], [partner knob, partner value]]}``, by the
    rules of the module docstring, in a deterministic order."""
    observations = list(observations)
    by_mech = {k.mechanism: k for k in knobs if k.mechanism}
    by_camp: dict[str, list[Observation]] = {}
    stored: set[Requirement] = set()
    for o in observations:
        by_camp.setdefault(o.campaign, []).append(o)
        env = environments.get(o.environment)
        for req in o.requirements:
            if mode == "filtered" and (env is None or any(
                    scope(env, target, mechanism_class(m)) != "covered" for m, _ in req)):
                continue
            stored.add(req)
    out: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for req in sorted(stored):
        if mode == "filtered" and (not _pinned(req, by_camp, environments)
                                   or _refuted(req, observations, environments, target)):
            continue
        need, partner = (target_setting(by_mech, m, v) for m, v in req)
        if need is None or partner is None or need[0] == partner[0]:
            continue
        key = (need[0], value_key(need[1]), partner[0], value_key(partner[1]))
        if key not in seen:
            seen.add(key)
            out.append({"requires": [list(need), list(partner)]})
    return out


__all__ = ["requirements"]
