"""``run_search``: one driver for real campaigns' simulations and the benchmark.

Two modes of filling GPU slots:

* synchronous rounds (``q``): ask for up to ``q`` candidates, evaluate them side
  by side, tell the outcomes back in batch order; the round lasts as long as
  its slowest trial;
* asynchronous (``slots``): ``slots`` trials run at once; whenever one finishes
  (in simulated time, out of order) its outcome is told and the free slot gets
  the next proposal at once via ``ask(1, pending=<still running>)``.

Simulated time: ``duration(cand, outcome)`` wall hours per trial (default: the
outcome's GPU hours, i.e. one GPU per trial).  When the trial budget is spent,
the promotion candidates are re-run back to back against the reference and the
strategy promotes.
"""

from __future__ import annotations

import heapq
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
    #: simulated wall hours (from the search's start) at which each trial's outcome was told
    wall_after: list[float] = field(default_factory=list)


def run_search(space: SearchSpace, evaluate: Callable[[Candidate], Outcome], budget_trials: int, q: int = 1,
               *, strategy: Strategy | None = None, noise: Any = None, reference_step_time_s: float | None = None,
               capacity_gib: float | None = None, seed: int = 0, promote_k: int = 2, rerun_pairs: int = 3,
               slots: int | None = None, duration: Callable[[Candidate, Outcome], float] | None = None,
               **controller_kwargs: Any) -> SearchResult:
    """Run one budgeted search and its promotion.

    Either pass a ready ``strategy`` or the arguments to build a :class:`SearchController`
    (``noise``, ``reference_step_time_s``, ``capacity_gib``, ``seed`` and any controller keyword).
    ``evaluate`` must return an :class:`Outcome` for any candidate, the reference included.
    With ``slots`` set the search runs asynchronously (``q`` is ignored); ``duration`` gives a trial's
    simulated wall hours.  Evaluation happens at submission, in submission order, so a seeded
    ``evaluate`` sees the same sequence in every run.  Stops early when the strategy has nothing new
    to propose and nothing is running.
    """
    if budget_trials < 0 or q < 1 or (slots is not None and slots < 1):
        raise ValueError("budget_trials must be >= 0, q >= 1 and slots >= 1")
    dur = duration or (lambda _c, o: float(o.gpu_hours))
    if strategy is None:
        from infrarsi.controller.search.controller import SearchController
        if noise is None or reference_step_time_s is None or capacity_gib is None:
            raise ValueError("run_search needs a strategy or noise, reference_step_time_s and capacity_gib")
        strategy = SearchController(space, noise, reference_step_time_s, capacity_gib, seed=seed, **controller_kwargs)
    trials: list[tuple[Candidate, Outcome]] = []
    best_after: list[Candidate | None] = []
    wall_after: list[float] = []
    gpu_h = 0.0
    clock = 0.0
    if slots is None:
        while len(trials) < budget_trials:
            batch = strategy.ask(min(q, budget_trials - len(trials)))
            if not batch:
                break
            outcomes = [evaluate(c) for c in batch]  # the q slots run side by side
            clock += max(dur(c, o) for c, o in zip(batch, outcomes))
            for c, o in zip(batch, outcomes):
                strategy.tell(c, o)
                trials.append((c, o))
                gpu_h += o.gpu_hours
                best_after.append(strategy.best())
                wall_after.append(clock)
    else:
        running: list[tuple[float, int, Candidate, Outcome]] = []  # (finish time, submission no., cand, outcome)
        submitted = 0
        while True:
            while len(running) < slots and submitted < budget_trials:
                got = strategy.ask(1, pending=[r[2] for r in sorted(running, key=lambda r: r[1])])
                if not got:
                    break
                o = evaluate(got[0])
                heapq.heappush(running, (clock + dur(got[0], o), submitted, got[0], o))
                submitted += 1
            if not running:
                break
            clock, _, c, o = heapq.heappop(running)
            strategy.tell(c, o)
            trials.append((c, o))
            gpu_h += o.gpu_hours
            best_after.append(strategy.best())
            wall_after.append(clock)
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
    return SearchResult(trials, best_after, promotion, reruns, gpu_h, promo_h, strategy.state_summary(), wall_after)
