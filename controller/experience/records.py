"""The experience protocol's records (issue 13, item 1): Environment, Observation, Effect.

These frozen dataclasses are what the store hands out and what retrieval, the search priors, ``doctor`` and the
``bank`` packs consume; nothing here touches the ORM.  Records reference their environment by
:meth:`Environment.digest` (a content hash, stable across databases), so a pack exported from one cluster imports
into another without renumbering.

Evidence tiers, strongest first (:data:`TIERS`, :func:`tier_rank`):

- ``verified-rerun``: the setting won a promotion re-run (fresh paired measurements beyond the noise gate);
- ``verified-search``: an accepted search trial whose paired log-speedup cleared the campaign's sigma_pair gate;
- ``verified-model``: the posterior main effect of the campaign's Bayesian time model, refitted on its verified
  runs only, for a setting measured only inside bundles, written when the posterior clears the same gate
  (:mod:`.evidence`);
- ``legacy``: a pre-protocol ``experience`` row migrated by revision 0005 (no environment beyond its GPU name).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

TIERS: tuple[str, ...] = ("verified-rerun", "verified-search", "verified-model", "legacy")


def tier_rank(tier: str) -> int:
    """Higher is stronger evidence; unknown tiers rank below every known one."""
    return len(TIERS) - TIERS.index(tier) if tier in TIERS else 0


@dataclass(frozen=True)
class Environment:
    """Where a measurement was made.  Every field but ``gpu_sku`` may be unknown (None / empty).

    ``params`` is the parameter count; ``seq_len`` tokens per sequence; ``parallel`` the layout string such as
    ``tp1-pp1-dp8``; ``software`` maps a package (torch, cuda, nccl, ...) to its version; ``reference_state`` maps
    mechanism -> canonical value of the reference configuration (what "off" meant for the effects measured here).
    """

    gpu_sku: str
    gpu_mem_gib: float | None = None
    peak_tflops: float | None = None
    bandwidth_gbs: float | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    interconnect: str | None = None
    software: dict[str, str] = field(default_factory=dict)
    framework: str | None = None
    model_family: str | None = None
    params: float | None = None
    seq_len: int | None = None
    parallel: str | None = None
    reference_state: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (the pack and database form)."""
        d = asdict(self)
        d["software"] = dict(sorted(self.software.items()))
        d["reference_state"] = dict(sorted(self.reference_state.items()))
        return d

    def digest(self) -> str:
        """sha256 (hex, 64 chars) of the canonical JSON of every field: equal environments share one row."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Environment":
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        names = {f.name for f in fields(cls)}
        extra = set(d) - names
        if extra:
            raise ValueError(f"environment: unknown field(s) {', '.join(sorted(extra))}")
        return cls(**{k: v for k, v in d.items()})


@dataclass(frozen=True)
class Observation:
    """One measured configuration of a campaign (one accepted or failed trial), normalized.

    ``environment`` is the environment digest; ``trial`` the campaign-local trial key; ``config`` the raw knob
    configuration; ``canonical`` mechanism -> canonical value; ``verdicts`` the verifier's per-layer verdicts
    (``{"L1": "pass", ...}`` or ``{"outcome": "oom"}``); ``oom_shortfall_gib`` how far over the memory cap an OOM
    went when known; ``conflicts`` minimal conflicting sets, each a tuple of (mechanism, canonical value) pairs
    that together failed (OOM, crash, rejection); ``requirements`` the "needs a partner" explanations of a crash,
    each ``((mechanism, value), (partner mechanism, partner value))``: the first setting crashed here because the
    second was missing (the search's failure ledger found every passing run of it held the partner).
    """

    environment: str
    campaign: str
    trial: str
    config: dict[str, Any]
    canonical: dict[str, str]
    patches: tuple[str, ...] = ()
    step_time_s: float | None = None
    peak_mem_gib: float | None = None
    verdicts: dict[str, Any] = field(default_factory=dict)
    oom_shortfall_gib: float | None = None
    conflicts: tuple[tuple[tuple[str, str], ...], ...] = ()
    requirements: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = ()
    created_at: datetime | None = None
    id: int | None = None


@dataclass(frozen=True)
class Effect:
    """One verified, noise-gated effect: setting ``mechanism`` to canonical ``value`` (against the environment's
    reference state) changed the step time by ``log_speedup`` = ln(t_ref / t); positive is faster.

    ``noise_floor`` is the campaign's sigma_pair (the gate the evidence cleared); ``conditioning`` the other
    mechanisms' canonical values the effect was measured under (empty for a single-knob change against the
    reference); ``klass`` the mechanism class (``kernel``/``balance``); ``tier`` the evidence tier (:data:`TIERS`);
    ``campaign`` the source campaign label (unique with ``trial``, ``mechanism``, ``value``: write-back is
    idempotent on that key); ``knob``/``raw_value`` the source contract's spelling; ``mem_delta_gib`` the peak
    memory change when measured.  ``env`` is filled in by the store (the referenced Environment) for retrieval.
    """

    environment: str
    mechanism: str
    value: str
    klass: str
    log_speedup: float
    noise_floor: float | None
    conditioning: dict[str, str]
    tier: str
    campaign: str
    trial: str
    knob: str | None = None
    raw_value: str | None = None
    mem_delta_gib: float | None = None
    created_at: datetime | None = None
    id: int | None = None
    env: Environment | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The idempotency key: (campaign, trial, mechanism, value)."""
        return (self.campaign, self.trial, self.mechanism, self.value)


def requirement_tuples(raw: Any) -> tuple[tuple[tuple[str, str], tuple[str, str]], ...]:
    """Stored requirements (JSON lists ``[[[m, v], [pm, pv]], ...]``, or None for a row written before migration
    0009) as :attr:`Observation.requirements` tuples."""
    return tuple(((str(s[0]), str(s[1])), (str(r[0]), str(r[1]))) for s, r in raw or ())


__all__ = ["TIERS", "tier_rank", "Environment", "Observation", "Effect", "requirement_tuples"]
