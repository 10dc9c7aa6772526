"""The experience-protocol part of :class:`~infrarsi.controller.store.memory.MemoryStore` (same contract as
:mod:`infrarsi.controller.store.experience_sql`: unique keys make every write idempotent)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Sequence

from infrarsi.controller.experience.records import Effect, Environment, Observation


def _now() -> datetime:
    return datetime.now(timezone.utc)


class ExperienceMemoryMixin:
    """Experience methods over ``self.db.exp`` (``envs``: digest -> (id, Environment); ``obs``, ``effects``:
    lists of records with ids), under the store's ``_write()`` / ``db.lock``."""

    def _exp(self) -> dict[str, Any]:
        exp = self.db.exp  # type: ignore[attr-defined]
        if not exp:
            exp.update(envs={}, obs=[], effects=[])
        return exp

    def _env_put(self, env: Environment) -> str:
        d = env.digest()
        envs = self._exp()["envs"]
        if d not in envs:
            envs[d] = (self.db.next_id("exp_environments"), Environment.from_dict(env.to_dict()))  # type: ignore
        return d

    def _check_envs(self, digests: set[str]) -> None:
        missing = digests - set(self._exp()["envs"])
        if missing:
            raise ValueError(f"unknown environment digest {sorted(missing)[0][:12]}... (add_environment it first)")

    def add_environment(self, env: Environment) -> str:
        with self._write():  # type: ignore[attr-defined]
            return self._env_put(env)

    def environments(self, digests: Sequence[str] | None = None) -> dict[str, Environment]:
        with self.db.lock:  # type: ignore[attr-defined]
            envs = self._exp()["envs"]
            return {d: Environment.from_dict(e.to_dict()) for d, (_, e) in sorted(envs.items(), key=lambda kv: kv[1][0])
                    if digests is None or d in digests}

    def add_observations(self, observations: Sequence[Observation], campaign_id: int | None = None) -> int:
        with self._write():  # type: ignore[attr-defined]
            self._check_envs({o.environment for o in observations})
            rows = self._exp()["obs"]
            keys = {(o.campaign, o.trial) for o, _ in rows}
            n = 0
            for o in observations:
                if (o.campaign, o.trial) in keys:
                    continue
                keys.add((o.campaign, o.trial))
                rows.append((replace(o, id=self.db.next_id("exp_observations"),  # type: ignore[attr-defined]
                                     created_at=o.created_at or _now()), campaign_id))
                n += 1
            return n

    def add_effects(self, effects: Sequence[Effect], campaign_id: int | None = None) -> int:
        with self._write():  # type: ignore[attr-defined]
            missing = {e.environment for e in effects if e.env is None} - set(self._exp()["envs"])
            if missing:
                self._check_envs(missing)
            for e in effects:
                if e.env is not None:
                    self._env_put(e.env)
            rows = self._exp()["effects"]
            keys = {e.key for e, _ in rows}
            n = 0
            for e in effects:
                if e.key in keys:
                    continue
                keys.add(e.key)
                rows.append((replace(e, id=self.db.next_id("exp_effects"), env=None,  # type: ignore[attr-defined]
                                     conditioning=dict(e.conditioning), created_at=e.created_at or _now()),
                             campaign_id))
                n += 1
            return n

    def effects(self, *, mechanisms: Sequence[str] | None = None, framework: str | None = None,
                model_family: str | None = None, gpu_sku: str | None = None, campaign: str | None = None,
                campaign_id: int | None = None, tiers: Sequence[str] | None = None,
                before: datetime | None = None) -> list[Effect]:
        with self.db.lock:  # type: ignore[attr-defined]
            envs = self._exp()["envs"]
            out = []
            for e, cid in self._exp()["effects"]:
                env = envs[e.environment][1]
                if ((mechanisms is not None and e.mechanism not in mechanisms)
                        or (framework is not None and env.framework != framework)
                        or (model_family is not None and env.model_family != model_family)
                        or (gpu_sku is not None and env.gpu_sku != gpu_sku)
                        or (campaign is not None and e.campaign != campaign)
                        or (campaign_id is not None and cid != campaign_id)
                        or (tiers is not None and e.tier not in tiers)
                        or (before is not None and e.created_at is not None and e.created_at >= before)):
                    continue
                out.append(replace(e, conditioning=dict(e.conditioning), env=Environment.from_dict(env.to_dict())))
            return out

    def experience_observations(self, *, campaign: str | None = None, campaign_id: int | None = None,
                                environment: str | None = None) -> list[Observation]:
        with self.db.lock:  # type: ignore[attr-defined]
            return [replace(o, config=dict(o.config), canonical=dict(o.canonical), verdicts=dict(o.verdicts))
                    for o, cid in self._exp()["obs"]
                    if (campaign is None or o.campaign == campaign) and (campaign_id is None or cid == campaign_id)
                    and (environment is None or o.environment == environment)]

    def prune_experience(self, *, before: datetime | None = None, gpu_sku: str | None = None,
                         campaign: str | None = None, campaign_id: int | None = None) -> dict[str, int]:
        if before is None and gpu_sku is None and campaign is None and campaign_id is None:
            raise ValueError("prune needs at least one of: before, gpu_sku, campaign")
        with self._write():  # type: ignore[attr-defined]
            exp = self._exp()
            envs = exp["envs"]

            def hit(rec: Any, cid: int | None) -> bool:
                return ((before is None or (rec.created_at is not None and rec.created_at < before))
                        and (gpu_sku is None or envs[rec.environment][1].gpu_sku == gpu_sku)
                        and (campaign is None or rec.campaign == campaign)
                        and (campaign_id is None or cid == campaign_id))

            counts = {}
            for name, key in (("effects", "effects"), ("observations", "obs")):
                keep = [(r, c) for r, c in exp[key] if not hit(r, c)]
                counts[name] = len(exp[key]) - len(keep)
                exp[key] = keep
            used = {r.environment for r, _ in exp["effects"]} | {r.environment for r, _ in exp["obs"]}
            gone = [d for d in envs if d not in used]
            for d in gone:
                del envs[d]
            counts["environments"] = len(gone)
            return counts
