"""Optuna TPE over the knobs only (like OptiCo): failures are reported as failed trials.

Duplicates proposed by TPE are answered from the cache without spending a trial
(up to a retry limit), which is kinder to TPE than counting them.
"""

from __future__ import annotations

import json
from typing import Sequence

import optuna

from infrarsi.controller.search.space import Candidate, Outcome, SearchSpace
from infrarsi.controller.search.strategies.baselines import BaselineStrategy

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _enc(v: object) -> str:
    return json.dumps(v, sort_keys=True, default=str)


class OptunaTPEStrategy(BaselineStrategy):
    """TPE sampler; minimises measured step time."""

    name = "optuna-tpe"

    def __init__(self, space: SearchSpace, reference_step_time_s: float, seed: int = 0, constant_liar: bool = False):
        super().__init__(space, reference_step_time_s, seed)
        # constant_liar: running trials count as bad ones, so parallel asks spread out (Optuna's batch mode)
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, constant_liar=constant_liar)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.dists = {k.name: optuna.distributions.CategoricalDistribution([_enc(v) for v in k.values])
                      for k in space.knobs}
        self.open: dict[Candidate, list] = {}
        self.results: dict[Candidate, Outcome] = {}

    def _candidate(self, trial) -> Candidate:
        d = {}
        for k in self.space.knobs:
            s = trial.params[k.name]
            d[k.name] = next(v for v in k.values if _enc(v) == s)
        return Candidate.from_dict(d)

    def _finish(self, trial, outcome: Outcome) -> None:
        if outcome.status == "ok":
            self.study.tell(trial, float(outcome.step_time_s))
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]:
        out: list[Candidate] = []
        taken = set(pending) | set(self.open)
        for _ in range(50 * q):
            if len(out) >= q:
                break
            trial = self.study.ask(self.dists)
            c = self._candidate(trial)
            if c in self.results:
                self._finish(trial, self.results[c])
                continue
            if c.is_reference(self.space):
                self.study.tell(trial, self.t0)
                continue
            if c in taken or not self.space.legal(c.as_dict()):
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            self.open.setdefault(c, []).append(trial)
            taken.add(c)
            out.append(c)
        return out

    def tell(self, cand: Candidate, outcome: Outcome) -> None:
        super().tell(cand, outcome)
        self.results[cand] = outcome
        for trial in self.open.pop(cand, []):
            self._finish(trial, outcome)
