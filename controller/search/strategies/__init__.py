"""Search strategies behind one ask/tell interface: ``infrarsi`` (the controller) and baselines.

``make_strategy(name, space, noise, reference_step_time_s, capacity_gib, seed, **kw)`` builds one;
``STRATEGIES`` lists the names.
"""

from __future__ import annotations

from typing import Any

from controller.search.space import SearchSpace

STRATEGIES = ("infrarsi", "random", "greedy", "optuna-tpe")


def make_strategy(name: str, space: SearchSpace, noise: Any, reference_step_time_s: float, capacity_gib: float,
                  seed: int = 0, **kwargs: Any):
    """Build strategy ``name``; raises ValueError for an unknown name."""
    if name == "infrarsi":
        from controller.search.controller import SearchController
        return SearchController(space, noise, reference_step_time_s, capacity_gib, seed=seed, **kwargs)
    if name == "random":
        from controller.search.strategies.baselines import RandomStrategy
        return RandomStrategy(space, reference_step_time_s, seed)
    if name == "greedy":
        from controller.search.strategies.baselines import GreedyStrategy
        return GreedyStrategy(space, reference_step_time_s, seed)
    if name == "optuna-tpe":
        from controller.search.strategies.optuna_tpe import OptunaTPEStrategy
        return OptunaTPEStrategy(space, reference_step_time_s, seed)
    raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
