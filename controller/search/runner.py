"""``run_search``: one driver for real campaigns' simulations and the benchmark.

It asks a strategy for up to ``q`` candidates (``q`` free GPU slots), evaluates
them through the callback, tells the outcomes back in order, and, when the
trial budget is spent, re-runs the promotion candidates back to back against
the reference and asks the strategy to promote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from infrarsi.controller.search.space import Candidate, Outcome, Promotion, SearchSpace


class Strategy(Protocol):
    """What ``run_search`` drives; :class:`SearchController` and the baselines implement it."""

    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]: ...
    def tell(self, cand: Candidate, outcome: Outcome) -> None: ...
    def best(self) -> Candidate | None: ...
    def promotion_candidates(self, k: int = 2) -> list[Candidate]: ...
    def promote(self, reruns: dict[Candidate, list[tuple[float, float]]]) -> Promotion: ...
    def state_summary(self) -> dict: ...


@dataclass
class SearchResult:
    """Everything a search did: trials in order, the best after each trial, promotion and its re-runs."""

    trials: list[tuple[Candidate, Outcome]]
    best_after: list[Candidate | None]
    promotion: Promotion
    reruns: dict[Candidate, list[tuple[float, float]]] = field(default_factory=dict)
    search_gpu_hours: float = 0.0
    promotion_gpu_hours: float = 0.0
    summary: dict = field(default_factory=dict)


def run_search(space: SearchSpace, evaluate: Callable[[Candidate], Outcome], budget_trials: int, q: int = 1,
               *, strategy: Strategy | None = None, noise: Any = None, reference_step_time_s: float | None = None,
               capacity_gib: float | None = None, seed: int = 0, promote_k: int = 2, rerun_pairs: int = 3,
               **controller_kwargs: Any) -> SearchResult:
    """Run one budgeted search and its promotion.

    Either pass a ready ``strategy`` or the arguments to build a :class:`SearchController`
    (``noise``, ``reference_step_time_s``, ``capacity_gib``, ``seed`` and any controller keyword).
    ``evaluate`` must return an :class:`Outcome` for any candidate, the reference included.
    Stops early when the strategy has nothing new to propose.
    """
    if budget_trials < 0 or q < 1:
        raise ValueError("budget_trials must be >= 0 and q >= 1")
    if strategy is None:
        from infrarsi.controller.search.controller import SearchController
        if noise is None or reference_step_time_s is None or capacity_gib is None:
            raise ValueError("run_search needs a strategy or noise, reference_step_time_s and capacity_gib")
        strategy = SearchController(space, noise, reference_step_time_s, capacity_gib, seed=seed, **controller_kwargs)
    trials: list[tuple[Candidate, Outcome]] = []
    best_after: list[Candidate | None] = []
    gpu_h = 0.0
    while len(trials) < budget_trials:
        batch = strategy.ask(min(q, budget_trials - len(trials)))
        if not batch:
            break
        outcomes = [evaluate(c) for c in batch]  # the q slots run side by side
        for c, o in zip(batch, outcomes):
            strategy.tell(c, o)
            trials.append((c, o))
            gpu_h += o.gpu_hours
            best_after.append(strategy.best())
    reruns: dict[Candidate, list[tuple[float, float]]] = {}
    promo_h = 0.0
    ref = space.reference()
    for cand in strategy.promotion_candidates(promote_k):
        pairs = []
        for _ in range(rerun_pairs):
            r, c = evaluate(ref), evaluate(cand)
            promo_h += r.gpu_hours + c.gpu_hours
            if r.status == "ok" and c.status == "ok":
                pairs.append((float(r.step_time_s), float(c.step_time_s)))
        reruns[cand] = pairs
    promotion = strategy.promote(reruns)
    return SearchResult(trials, best_after, promotion, reruns, gpu_h, promo_h, strategy.state_summary())
