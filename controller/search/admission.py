"""Near-copy admission: keep several tests of one unresolved crash from running at once (issue 15).

A crash whose cause is open (the failure ledger's suspect tuples, :meth:`FailureLedger.suspects`) is tested by
the next candidate that holds most of those tuples; several such candidates in flight at once likely share the
true cause, crash together and take their slots with them.  :class:`NearCopies` names the crash records a
candidate is a near copy of and refuses a second busy near copy of any of them.  With nothing busy it never
refuses, so the one-at-a-time search is unchanged by it.

It reads the ledger and nothing else of the controller's state, and caches per tell (the ledger changes only
there): the controller asks it for every proposed candidate and every busy one.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from infrarsi.controller.search.batch import AGGRESSIVE
from infrarsi.controller.search.failures import FailureLedger
from infrarsi.controller.search.space import PATCH, Candidate, SearchSpace, Setting


class NearCopies:
    """The near-copy relation between candidates and the ledger's crash records (see the module docstring).

    A near copy of a record holds more than ``tune["suspect_share"]`` of its open suspect tuples
    (:meth:`FailureLedger.shares`), or (``tune["common_factor"]``) a setting held by two or more failures and no
    passing run (:meth:`FailureLedger.common_factors`: FP8 attention that shifts the loss fails beside one new
    partner after another, and each new pair holds none of the old records' pairs).  Only records with an
    aggressive suspect count, and only aggressive common factors (a setting whose prior |effect| is
    :data:`~infrarsi.controller.search.batch.AGGRESSIVE` gates, as for the hedges): in a space of mild levers
    every good candidate is a near copy of the first crash, and there is no prime suspect to keep apart.
    """

    def __init__(self, ledger: FailureLedger, space: SearchSpace, tune: Mapping[str, Any], gate: float) -> None:
        self._ledger, self._space, self._tune, self._gate = ledger, space, tune, gate
        #: (tells, records with an aggressive suspect, near-copy records per candidate, bold common factors and
        #: their records)
        self._cache: tuple[int, tuple[int, ...], dict[Candidate, frozenset[int]], dict[Setting, frozenset[int]]] \
            = (-1, (), {}, {})

    def refusal(self, cand: Candidate, busy: Iterable[Candidate], tells: int) -> str | None:
        """Why ``cand`` would be a second busy near copy of a crash whose cause is open, else None; ``tells``: the
        number of outcomes told so far (the cache key)."""
        busy = list(busy)
        if not busy or not self._ledger.crash_records:
            return None
        mine = self.records(cand, tells)
        if mine and any(mine & self.records(b, tells) for b in busy):
            limit = float(self._tune["suspect_share"])
            return (f"a near copy of an unresolved crash is already running (over {limit:.0%} of its suspect tuples, "
                    "or a setting common to its failures)")
        return None

    def records(self, cand: Candidate, tells: int) -> frozenset[int]:
        """The crash records (indices) of which ``cand`` is a near copy: those with an aggressive suspect whose
        open tuples it mostly holds, and those of an aggressive common factor it holds."""
        ledger = self._ledger
        if self._cache[0] != tells:
            bold = AGGRESSIVE * self._gate
            records = tuple(i for i, hyps in enumerate(ledger.open_suspects())
                            if any(abs(ledger.risk(x)) >= bold for t in hyps for x in t))
            common = {s: idx for s, idx in ledger.common_factors().items()
                      if abs(ledger.risk(s)) >= bold} if self._tune["common_factor"] else {}
            self._cache = (tells, records, {}, common)
        _, records, known, common = self._cache
        if cand not in known:
            limit = float(self._tune["suspect_share"])
            sets = frozenset(x for x in cand.settings(self._space) if x[0] != PATCH)
            shares = ledger.shares(sets) if records else []
            near = {i for i in records if shares[i] > limit}
            for s in sets & common.keys():
                near |= common[s]
            known[cand] = frozenset(near)
        return known[cand]
