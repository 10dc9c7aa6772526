"""The ``catalog`` proposer: priors from the built-in mechanism catalog (``controller/experience/mechanisms.py``),
the paper's fallback when no model is configured.

For every contract knob whose ``mechanism`` (or name) resolves to a catalog mechanism with a prior, and every
non-reference value of it, one :class:`~infrarsi.controller.proposers.schema.KnobPrior`:

* on/off mechanisms: ``+prior`` for turning it on from an off reference, ``-prior`` for turning it off;
* mechanisms with an ordered closed value set (``naive < sdpa < flash``, ``loop < foreach < fused``): the prior is the effect of going from the first to the last value, scaled linearly by the values'
  positions (``naive -> sdpa`` gets half of ``naive -> flash``);
* ``mixed_precision`` (fp32 -> bf16 or fp16): every non-fp32 value gets the full prior;
* the same scaling for the memory delta; the spread is the mechanism's spread (never scaled below 0.02).

Values the catalog cannot place (open sets such as micro-batch sizes, unknown spellings) get no prior.  No request
is sent anywhere: the outcome is free and deterministic.
"""

from __future__ import annotations

import time
from typing import Any

from infrarsi.controller.errors import one_line
from infrarsi.controller.proposers.base import PromptContext, Proposer, ProposerOutcome
from infrarsi.controller.proposers.schema import KnobPrior, Proposal, value_text
from infrarsi.controller.proposers.spec import CatalogSpec

MIN_SPREAD = 0.02
#: mechanisms whose first canonical value is the default and every other value a full alternative (fp32 vs
#: bf16 or fp16), not a scale
ALTERNATIVES = frozenset({"mixed_precision"})


def _position(mech: Any, canon: str) -> float | None:
    """Where ``canon`` sits in the mechanism's closed value set, 0 (first) .. 1 (last); None when outside it."""
    values = mech.canonical_values
    if not values or canon not in values or len(values) < 2:
        return None
    if mech.name in ALTERNATIVES:
        return 0.0 if canon == values[0] else 1.0
    return values.index(canon) / (len(values) - 1)


def catalog_priors(knobs: list[Any]) -> list[KnobPrior]:
    """Catalog priors for contract ``knobs`` (objects with ``name``, ``values``, ``reference``, ``mechanism`` and
    optionally ``canonical``), in knob then value order.  Raises ImportError when the catalog is not installed."""
    from infrarsi.controller.experience.mechanisms import CATALOG, normalize

    out: list[KnobPrior] = []
    for knob in knobs:
        cmap = getattr(knob, "canonical", None)
        mech_name, ref_canon = normalize(knob.name, getattr(knob, "mechanism", None), knob.reference, cmap)
        mech = CATALOG.get(mech_name or "")
        if mech is None or mech.prior_log_speedup is None or mech.prior_spread is None:
            continue
        ref_pos = _position(mech, ref_canon)
        if ref_pos is None:
            continue
        for value in knob.values:
            if value == knob.reference and type(value) is type(knob.reference):
                continue
            _, canon = normalize(knob.name, getattr(knob, "mechanism", None), value, cmap)
            pos = _position(mech, canon)
            if pos is None or pos == ref_pos:
                continue
            step = pos - ref_pos
            mem = None if mech.mem_gib is None else round(mech.mem_gib * step, 6)
            out.append(KnobPrior(knob=knob.name, value=value_text(value),
                                 mean_log_speedup=round(mech.prior_log_speedup * step, 6),
                                 spread=max(MIN_SPREAD, round(mech.prior_spread * abs(step), 6)), mem_gib=mem))
    return out


class CatalogProposer(Proposer):
    """Priors for the contract's knobs from the mechanism catalog (no model, no cost)."""

    kind = "catalog"

    def __init__(self, spec: CatalogSpec, *, contract: Any) -> None:
        self.spec = spec
        self.name = spec.name
        self.knobs = list(getattr(contract, "knobs", []))

    def propose(self, ctx: PromptContext) -> ProposerOutcome:
        """Catalog priors (patches: none).  ok=False only when the catalog cannot be loaded."""
        t0 = time.monotonic()
        try:
            priors = catalog_priors(self.knobs)
        except ImportError as exc:
            return self.failed(f"mechanism catalog not available: {one_line(exc)}", wall_s=time.monotonic() - t0)
        reason = "" if priors else "no contract knob names a catalog mechanism with a prior"
        return ProposerOutcome(proposer=self.name, kind=self.kind, model=self.model, ok=True, reason=reason,
                               proposal=Proposal(priors=priors), prompt_digest="", wall_s=time.monotonic() - t0)
