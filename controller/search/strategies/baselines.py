"""Baseline strategies: uniform random search and single-incumbent greedy hill-climbing.

Both promote like the autoresearch loop: the best measured candidate, if its
single measurement beat the reference's measured step time (no re-run gate).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infrarsi.controller.search.space import Candidate, Outcome, Promotion, SearchSpace


class BaselineStrategy:
    """Shared bookkeeping: history, best-by-measured-time, measured-improvement promotion."""

    name = "baseline"

    def __init__(self, space: SearchSpace, reference_step_time_s: float, seed: int = 0):
        self.space = space
        self.t0 = float(reference_step_time_s)
        self.seed = int(seed)
        self.history: list[tuple[Candidate, Outcome]] = []
        self.seen: set[Candidate] = {space.reference()}

    def _rng(self, n_pending: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, len(self.history), n_pending])

    def _random_candidate(self, rng: np.random.Generator, with_patches: bool = True) -> Candidate:
        d = {k.name: k.values[int(rng.integers(len(k.values)))] for k in self.space.knobs}
        patches = [p for p in self.space.patches if with_patches and rng.random() < 0.5]
        return Candidate.from_dict(d, patches)

    def tell(self, cand: Candidate, outcome: Outcome) -> None:
        self.history.append((cand, outcome))
        self.seen.add(cand)

    def best(self) -> Candidate | None:
        ok = [(o.step_time_s, c.signature, c) for c, o in self.history if o.status == "ok"]
        return min(ok)[2] if ok else None

    def best_time(self) -> float:
        ok = [o.step_time_s for _, o in self.history if o.status == "ok"]
        return min(ok) if ok else float("inf")

    def promotion_candidates(self, k: int = 2) -> list[Candidate]:
        return []

    def promote(self, reruns: dict[Candidate, list[tuple[float, float]]]) -> Promotion:
        b = self.best()
        if b is None or self.best_time() >= self.t0:
            return Promotion(None, 1.0, "no measured improvement")
        return Promotion(b, self.t0 / self.best_time(), "best measured trial (no re-run gate)")

    def state_summary(self) -> dict:
        return {"strategy": self.name, "trials": len(self.history)}


class RandomStrategy(BaselineStrategy):
    """Uniform random legal configurations (and random patch subsets), never repeating."""

    name = "random"

    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]:
        rng = self._rng(len(pending))
        out: list[Candidate] = []
        taken = set(pending) | self.seen
        for _ in range(2000):
            if len(out) >= q:
                break
            c = self._random_candidate(rng)
            if c not in taken and self.space.legal(c.as_dict()):
                taken.add(c)
                out.append(c)
        return out


class GreedyStrategy(BaselineStrategy):
    """Single-incumbent hill climbing: mutate one knob or patch of the incumbent; keep any measured improvement."""

    name = "greedy"

    def __init__(self, space: SearchSpace, reference_step_time_s: float, seed: int = 0):
        super().__init__(space, reference_step_time_s, seed)
        self.incumbent = space.reference()
        self.incumbent_time = self.t0

    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]:
        rng = self._rng(len(pending))
        taken = set(pending) | self.seen
        out: list[Candidate] = []
        n_moves = len(self.space.knobs) + len(self.space.patches)
        for _ in range(2000):
            if len(out) >= q:
                break
            j = int(rng.integers(n_moves))
            if j < len(self.space.knobs):
                k = self.space.knobs[j]
                others = [v for v in k.values if v != self.incumbent.value(k.name)]
                c = self.incumbent.with_values({k.name: others[int(rng.integers(len(others)))]})
            else:
                p = self.space.patches[j - len(self.space.knobs)]
                c = Candidate(self.incumbent.config, self.incumbent.patches ^ {p})
            if c not in taken and self.space.legal(c.as_dict()):
                taken.add(c)
                out.append(c)
        return out

    def tell(self, cand: Candidate, outcome: Outcome) -> None:
        super().tell(cand, outcome)
        if outcome.status == "ok" and outcome.step_time_s < self.incumbent_time:
            self.incumbent, self.incumbent_time = cand, float(outcome.step_time_s)
