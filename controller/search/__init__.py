"""Run-stage search (paper section 4) as a library over an abstract evaluate callback.

Public API (imported lazily so ``import infrarsi.controller.search.space`` stays light):

* :class:`KnobSpec`, :class:`SearchSpace`, :class:`Candidate`, :class:`Outcome`, :class:`Promotion`
  (``infrarsi.controller.search.space``)
* :class:`SearchController` (``infrarsi.controller.search.controller``)
* :func:`run_search`, :class:`SearchResult` (``infrarsi.controller.search.runner``)
* :func:`make_strategy` (``infrarsi.controller.search.strategies``), baselines random/greedy/optuna-tpe
* :func:`load_landscape`, :func:`run_benchmark` (``infrarsi.controller.search.landscape`` / ``.benchmark``)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KnobSpec": "space", "SearchSpace": "space", "Candidate": "space", "Outcome": "space", "Promotion": "space",
    "SearchController": "controller", "run_search": "runner", "SearchResult": "runner",
    "make_strategy": "strategies", "load_landscape": "landscape", "run_benchmark": "benchmark",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"infrarsi.controller.search.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
