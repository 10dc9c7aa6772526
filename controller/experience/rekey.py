"""Re-key experience written under an older catalog: selective activation checkpointing filed as ``on``.

Until 2026-12-07 (the releases before migration 0011) the mechanism catalog aliased the value ``selective`` of
``activation_checkpointing`` to ``on``, the canonical value of full recompute.  A three-state knob (full / selective / none) therefore filed selective's
records under full recompute's key, and retrieval could not tell the two apart.  The records kept what is needed to
undo it: an effect its source ``raw_value``, an observation its raw knob ``config``.  :func:`rekey` files them
under ``selective``, the catalog's value since then, in every place the key appears:

- an effect's ``value`` when its ``raw_value`` is ``selective`` (any case), and its ``conditioning`` when the run
  it was measured in was re-keyed;
- an observation's ``canonical`` value when its checkpointing knob held ``selective``, and the same pair inside its
  ``conflicts`` and ``requirements``;
- an environment's ``reference_state`` when its reference run held ``selective``; the environment's digest (a hash
  of every field) changes with it, and every record of that environment follows to the new digest.

The checkpointing knob of a campaign is the knob its effects name for the mechanism, or any configuration key the
catalog resolves to it (``recompute_granularity``, ``activation_checkpointing``, ...).  A campaign's reference run
is its first observation (in the order given) whose canonical values all equal its environment's reference
state: write-back stores the reference run first, and pack export keeps that order.  Under the old keys a
selective run beside a full-recompute reference looks like the reference; only the order tells them apart.

Used by migration 0011 (the database) and by pack import (packs exported before the fix).  Pure and idempotent:
records written since the fix, or re-keyed once, come back unchanged, so it is safe on any pack.  The one record it
cannot tell from the old alias is a contract's own ``canonical: {selective: on}``, which pooled the two states on
purpose; it is re-keyed too (``contract check`` now warns about such a map).
``reverse=True`` maps ``selective`` back to ``on`` for the same records (the migration's downgrade).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from infrarsi.controller.experience.mechanisms import resolve
from infrarsi.controller.experience.records import Effect, Environment, Observation

MECHANISM = "activation_checkpointing"
#: the key selective runs were filed under before the fix, and the one they belong under
OLD, NEW = "on", "selective"


def _selective(raw: Any) -> bool:
    return isinstance(raw, str) and raw.strip().lower() == NEW


def _swap(pair: Sequence[str], src: str, dst: str) -> tuple[str, str]:
    m, v = str(pair[0]), str(pair[1])
    return (m, dst) if m == MECHANISM and v == src else (m, v)


def checkpoint_knobs(observations: Iterable[Observation], effects: Iterable[Effect]) -> dict[str, set[str]]:
    """campaign -> the knob names that set activation checkpointing there (named by an effect of the mechanism,
    or resolved through the catalog's aliases from the observation's configuration keys)."""
    out: dict[str, set[str]] = {}
    for e in effects:
        if e.mechanism == MECHANISM and e.knob:
            out.setdefault(e.campaign, set()).add(e.knob)
    for o in observations:
        names = {k for k in o.config if resolve(k) == MECHANISM}
        if names:
            out.setdefault(o.campaign, set()).update(names)
    return out


def rekey(environments: Mapping[str, Environment], observations: Sequence[Observation], effects: Sequence[Effect],
          reverse: bool = False) -> tuple[dict[str, Environment], list[Observation], list[Effect], dict[str, str]]:
    """``(environments by digest, observations, effects, digest map)`` with selective runs filed under ``selective``
    (``reverse``: back under ``on``).  The digest map holds the environments whose digest changed (old -> new);
    records are in their input order, and a record nothing applies to is returned as it was."""
    src, dst = (NEW, OLD) if reverse else (OLD, NEW)
    knobs = checkpoint_knobs(observations, effects)
    moved: set[tuple[str, str]] = set()  # (campaign, trial) of the observations re-keyed
    reference_runs: set[str] = set()  # digests whose reference run was one of them
    first: set[str] = set()  # campaigns whose reference run has been seen
    obs_out: list[Observation] = []
    for o in observations:
        env = environments.get(o.environment)
        is_reference = env is not None and o.campaign not in first and o.canonical == {
            m: str(env.reference_state.get(m)) for m in o.canonical}
        if is_reference:
            first.add(o.campaign)
        held = [o.config.get(k) for k in sorted(knobs.get(o.campaign, ())) if k in o.config]
        if o.canonical.get(MECHANISM) != src or not any(_selective(v) for v in held):
            obs_out.append(o)
            continue
        moved.add((o.campaign, o.trial))
        if is_reference:
            reference_runs.add(o.environment)
        obs_out.append(replace(
            o, canonical={**o.canonical, MECHANISM: dst},
            conflicts=tuple(tuple(_swap(p, src, dst) for p in c) for c in o.conflicts),
            requirements=tuple((_swap(s, src, dst), _swap(r, src, dst)) for s, r in o.requirements)))
    envs: dict[str, Environment] = {}
    digests: dict[str, str] = {}
    for digest, env in environments.items():
        if digest in reference_runs:
            env = replace(env, reference_state={**env.reference_state, MECHANISM: dst})
            digests[digest] = env.digest()
        envs[digests.get(digest, digest)] = env
    obs_out = [replace(o, environment=digests[o.environment]) if o.environment in digests else o for o in obs_out]
    eff_out: list[Effect] = []
    for e in effects:
        changes: dict[str, Any] = {}
        if e.mechanism == MECHANISM and e.value == src and _selective(e.raw_value):
            changes["value"] = dst
        if (e.campaign, e.trial) in moved and e.conditioning.get(MECHANISM) == src:
            changes["conditioning"] = {**e.conditioning, MECHANISM: dst}
        if e.environment in digests:
            changes["environment"] = digests[e.environment]
            changes["env"] = envs[digests[e.environment]]
        eff_out.append(replace(e, **changes) if changes else e)
    return envs, obs_out, eff_out, digests


__all__ = ["MECHANISM", "OLD", "NEW", "checkpoint_knobs", "rekey"]
