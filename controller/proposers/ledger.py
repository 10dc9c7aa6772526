"""Write a proposer request to the ledger: one :class:`~infrarsi.controller.proposers.base.ProposerOutcome` is one
``proposer_requests`` row (``Store.add_proposer_request``), with the tokens also booked in the cost ledger.

Only the outcome's own fields are written: proposer, kind, model, tokens, money, wall time, ok/failed, the
one-line reason and the prompt's digest; never the prompt, the answer or any key.
"""

from __future__ import annotations

from typing import Any

from infrarsi.controller.proposers.base import ProposerOutcome


def record_outcome(store: Any, campaign_id: int, outcome: ProposerOutcome, *, request: str, stage: str,
                   scope: dict[str, Any] | None = None) -> Any:
    """Append ``outcome`` (the answer to a ``request``: priors, patches or complete, asked at ``stage``) to the
    ledger of ``campaign_id``; return the stored :class:`ProposerRequestRecord`.  ``scope`` (the campaign's new
    scope record) is written in the same transaction (:meth:`Store.add_proposer_request`)."""
    prop = outcome.proposal
    return store.add_proposer_request(
        campaign_id, stage=stage, proposer=outcome.proposer, kind=outcome.kind, request=request,
        model=outcome.model or "-", tokens_in=int(outcome.tokens_in), tokens_out=int(outcome.tokens_out),
        usd=outcome.usd, wall_s=max(0.0, float(outcome.wall_s)), outcome=outcome.outcome, reason=outcome.reason,
        prompt_digest=outcome.prompt_digest, n_priors=len(prop.priors) if prop else 0,
        n_patches=len(prop.patches) if prop else 0, scope=scope)
