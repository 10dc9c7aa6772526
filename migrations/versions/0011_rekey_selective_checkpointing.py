"""experience written before the catalog fix files selective activation checkpointing under "selective" (issue 13)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07

A data revision; the schema does not change.  Until 2026-12-07 the mechanism catalog aliased the value
``selective`` of ``activation_checkpointing`` to ``on``, the canonical value of full recompute, so a knob with
full / selective / none values filed selective's effects, observations, conflict tuples and (when the reference
ran selective) its environment's reference state under full recompute's key.  The rows kept the raw spelling
(``exp_effects.raw_value``, ``exp_observations.config``), and :func:`infrarsi.controller.experience.rekey.rekey`
files them under ``selective``.  An environment whose reference state changes gets its new digest; if an
environment with that digest already exists, the records move to it and the duplicate row goes.  Nothing is
deleted but such a duplicate.  Downgrade files the same rows back under ``on`` (the pre-0011 keys), without
splitting merged environments again.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_ENV_FIELDS = ("gpu_sku", "gpu_mem_gib", "peak_tflops", "bandwidth_gbs", "gpus_per_node", "nodes", "interconnect",
               "software", "framework", "model_family", "params", "seq_len", "parallel", "reference_state")
_JSON = {"software", "reference_state", "config", "canonical", "conflicts", "requirements", "conditioning"}


def _table(name: str, *cols: str) -> Any:
    return sa.table(name, *[sa.column(c, sa.JSON() if c in _JSON else None) for c in cols])


def _json(v: Any, default: Any) -> Any:
    import json

    if isinstance(v, str):
        return json.loads(v)
    return default if v is None else v


def _rekey(reverse: bool) -> None:
    from infrarsi.controller.experience.records import Effect, Environment, Observation, requirement_tuples
    from infrarsi.controller.experience.rekey import rekey

    bind = op.get_bind()
    env_t = _table("exp_environments", "id", "digest", *_ENV_FIELDS)
    obs_t = _table("exp_observations", "id", "environment_id", "campaign", "trial", "config", "canonical",
                   "conflicts", "requirements")
    eff_t = _table("exp_effects", "id", "environment_id", "campaign", "trial", "mechanism", "value", "klass",
                   "log_speedup", "conditioning", "tier", "knob", "raw_value")
    envs: dict[str, Environment] = {}
    env_id: dict[str, int] = {}
    digest_of: dict[int, str] = {}
    for r in bind.execute(sa.select(env_t)).mappings():
        fields = {f: r[f] for f in _ENV_FIELDS}
        fields["software"] = _json(fields["software"], {})
        fields["reference_state"] = _json(fields["reference_state"], {})
        envs[r["digest"]] = Environment(**fields)
        env_id[r["digest"]] = r["id"]
        digest_of[r["id"]] = r["digest"]
    obs = [Observation(environment=digest_of[r["environment_id"]], campaign=r["campaign"], trial=r["trial"],
                       config=_json(r["config"], {}), canonical=_json(r["canonical"], {}),
                       conflicts=tuple(tuple((str(a), str(b)) for a, b in c) for c in _json(r["conflicts"], [])),
                       requirements=requirement_tuples(_json(r["requirements"], [])), id=r["id"])
           for r in bind.execute(sa.select(obs_t).order_by(obs_t.c.id)).mappings()]
    effs = [Effect(environment=digest_of[r["environment_id"]], mechanism=r["mechanism"], value=r["value"],
                   klass=r["klass"], log_speedup=r["log_speedup"], noise_floor=None,
                   conditioning=_json(r["conditioning"], {}), tier=r["tier"], campaign=r["campaign"],
                   trial=r["trial"], knob=r["knob"], raw_value=r["raw_value"], id=r["id"])
            for r in bind.execute(sa.select(eff_t).order_by(eff_t.c.id)).mappings()]
    new_envs, new_obs, new_effs, digests = rekey(envs, obs, effs, reverse=reverse)
    for old, new in digests.items():
        if new in env_id:  # an environment with the re-keyed fields already exists: its row takes the records
            for t in (obs_t, eff_t):
                bind.execute(sa.update(t).where(t.c.environment_id == env_id[old]).values(environment_id=env_id[new]))
            bind.execute(sa.delete(env_t).where(env_t.c.id == env_id[old]))
        else:
            bind.execute(sa.update(env_t).where(env_t.c.id == env_id[old]).values(
                digest=new, reference_state=new_envs[new].reference_state))
            env_id[new] = env_id[old]
    for before, after in zip(obs, new_obs):
        if (after.canonical, after.conflicts, after.requirements) != (before.canonical, before.conflicts,
                                                                     before.requirements):
            bind.execute(sa.update(obs_t).where(obs_t.c.id == before.id).values(
                canonical=after.canonical, conflicts=[[list(p) for p in c] for c in after.conflicts],
                requirements=[[list(s), list(r)] for s, r in after.requirements]))
    for before, after in zip(effs, new_effs):
        if (after.value, after.conditioning) != (before.value, before.conditioning):
            bind.execute(sa.update(eff_t).where(eff_t.c.id == before.id).values(
                value=after.value, conditioning=after.conditioning))


def upgrade() -> None:
    _rekey(reverse=False)


def downgrade() -> None:
    _rekey(reverse=True)
