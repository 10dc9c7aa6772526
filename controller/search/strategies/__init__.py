"""Search strategies behind one ask/tell interface: ``infrarsi`` (the controller) and baselines.

``make_strategy(name, space, noise, reference_step_time_s, capacity_gib, seed, **kw)`` builds one;
``STRATEGIES`` lists the names; ``infrarsi-noprior`` is an ablation (no stated knob, memory or
patch priors).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from infrarsi.controller.search.space import SearchSpace

STRATEGIES = ("infrarsi", "random", "greedy", "optuna-tpe", "infrarsi-noprior")
#: what ``bench search`` runs by default
DEFAULT_STRATEGIES = STRATEGIES[:4]


def make_strategy(name: str, space: SearchSpace, noise: Any, reference_step_time_s: float, capacity_gib: float,
                  seed: int = 0, **kwargs: Any):
    """Build strategy ``name``; raises ValueError for an unknown name.

    ``parallel=True`` says more than one trial may be pending at an ask (Optuna then uses
    ``constant_liar``); the other strategies take pending trials through ``ask(pending=...)``.
    """
    parallel = bool(kwargs.pop("parallel", False))
    if name in ("infrarsi", "infrarsi-noprior"):
        from infrarsi.controller.search.controller import SearchController
        if name == "infrarsi-noprior":  # ablation: the same controller with every stated prior removed
            space = SearchSpace(tuple(replace(k, prior_mean=None, prior_sd=None, mem_prior_gib=None)
                                      for k in space.knobs), space.patches, space.is_legal)
            kwargs.pop("patch_priors", None)
        return SearchController(space, noise, reference_step_time_s, capacity_gib, seed=seed, **kwargs)
    if name == "random":
        from infrarsi.controller.search.strategies.baselines import RandomStrategy
        return RandomStrategy(space, reference_step_time_s, seed)
    if name == "greedy":
        from infrarsi.controller.search.strategies.baselines import GreedyStrategy
        return GreedyStrategy(space, reference_step_time_s, seed)
    if name == "optuna-tpe":
        from infrarsi.controller.search.strategies.optuna_tpe import OptunaTPEStrategy
        return OptunaTPEStrategy(space, reference_step_time_s, seed, constant_liar=parallel)
    raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
