"""The device-hour budget with trials in flight and the promotion reserved up front.

Before this module the budget only stopped *new* search trials once the ledger showed it spent, while trials in
flight and the promotion's back-to-back re-runs still ran: on two H200s a 0.17 GPU-hour budget spent 0.273 (161%).
The rule now (issue 15, item 4):

- every finished trial is charged what the ledger says (``Store.cost_by_stage``: GPU-hours, plus CPU-hours for CPU
  trials, the unit the campaign's budget binds);
- a trial in flight is charged its *expected* cost: the mean ledger cost of the finished trials of its stage (the
  reference runs' mean until a search trial has finished: the reference is usually the slowest configuration, so
  this errs high);
- the promotion's expected cost is reserved from the start: ``promotion_candidates x rerun_pairs`` pairs, each a
  reference re-run (reference mean) plus a candidate run (search mean);
- a search trial starts only when spent + in flight + reserve + its own expected cost <= budget.

Hence the campaign overruns its budget only by how much actual costs exceed their expectations (in practice less
than one trial's cost), never by whole rounds of trials. :func:`budget_view` is pure (ledger rows in, a frozen
view out) so the engine, the report and tests compute the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class BudgetView:
    """What the budget allows now.  All amounts in device-hours (GPU-hours, or CPU-hours for CPU trials)."""

    budget: float
    spent: float                 #: the ledger's total (finished trials)
    spent_by_stage: dict[str, float]
    per_search_trial: float      #: expected cost of one search trial
    per_reference_run: float     #: expected cost of one reference (re-)run
    in_flight: int               #: search trials submitted and not finished
    reserve: float               #: expected cost of the promotion not yet spent

    @property
    def committed(self) -> float:
        """Spent, plus the trials in flight at their expected cost, plus the promotion reserve."""
        return self.spent + self.in_flight * self.per_search_trial + self.reserve

    def search_slots(self) -> int:
        """How many more search trials fit in the budget beside those in flight and the promotion reserve."""
        if self.per_search_trial <= 0:
            return 0 if self.spent >= self.budget else 1_000_000
        room = self.budget - self.committed
        return max(0, int(math.floor(room / self.per_search_trial + 1e-9)))

    def to_dict(self) -> dict[str, Any]:
        """JSON for result.json (``budget``) and the report."""
        return {**asdict(self), "committed": self.committed}

    def describe(self) -> str:
        """One line for progress output and REPORT.md."""
        return (f"budget {self.budget:.4g} h: spent {self.spent:.4g}, {self.in_flight} in flight at "
                f"~{self.per_search_trial:.3g} h each, promotion reserve {self.reserve:.3g} h "
                f"-> committed {self.committed:.4g} h ({self.committed / self.budget:.0%})"
                if self.budget > 0 else "no budget")


def _hours(row: Mapping[str, Any]) -> float:
    return float(row.get("gpu_hours") or 0.0) + float(row.get("cpu_hours") or 0.0)


def budget_view(budget: float, cost_rows: Iterable[Mapping[str, Any]], in_flight: int, promotion_runs: int,
                promotion_runs_done: int = 0) -> BudgetView:
    """The budget as it stands.

    ``cost_rows`` are :meth:`Store.cost_by_stage` rows (stage, entries, gpu_hours, cpu_hours; rows with no trial,
    such as language-model cost, have zero hours and are ignored for the means).  ``promotion_runs`` is the number
    of back-to-back runs the promotion will make (candidates x pairs x 2: reference re-run + candidate), of which
    ``promotion_runs_done`` are already in the ledger.
    """
    spent: dict[str, float] = {}
    runs: dict[str, int] = {}
    for r in cost_rows:
        h = _hours(r)
        stage = str(r.get("stage") or "other")
        spent[stage] = spent.get(stage, 0.0) + h
        if h > 0:
            runs[stage] = runs.get(stage, 0) + int(r.get("entries") or 0)
    ref = spent.get("reference", 0.0) / runs["reference"] if runs.get("reference") else 0.0
    search = spent["search"] / runs["search"] if runs.get("search") else ref
    # the promotion alternates a reference re-run (even run index) and a candidate run (odd index)
    left = range(max(0, promotion_runs_done), max(0, promotion_runs))
    reserve = sum(ref if i % 2 == 0 else search for i in left)
    return BudgetView(budget=float(budget), spent=sum(spent.values()), spent_by_stage=spent,
                      per_search_trial=search, per_reference_run=ref, in_flight=int(in_flight), reserve=reserve)


def concurrency(intervals: Iterable[tuple[float | None, float | None]]) -> dict[str, Any]:
    """How many trials ran at once: ``peak`` and the time-weighted ``mean`` over the span in which at least one
    ran, from (start, end) unix times (trials without both are skipped).  For REPORT.md (issue 15, item 5)."""
    events: list[tuple[float, int]] = []
    for s, e in intervals:
        if s is not None and e is not None and e > s:
            events += [(float(s), 1), (float(e), -1)]
    if not events:
        return {"peak": 0, "mean": None, "trials": 0}
    events.sort(key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    running = peak = 0
    busy = weighted = 0.0
    last = events[0][0]
    for t, d in events:
        if running:
            busy += t - last
            weighted += running * (t - last)
        running += d
        peak = max(peak, running)
        last = t
    return {"peak": peak, "mean": weighted / busy if busy else None, "trials": len(events) // 2}
