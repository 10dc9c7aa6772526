"""The narrow interface between the search controller and its proposal operators.

Operators (:mod:`infrarsi.controller.search.proposals`, :mod:`infrarsi.controller.search.batch`) see the
controller only through a :class:`SearchView`: a read-only window onto the controller's live state (the
space, the models' predictions, the noise gate, the incumbent, the failure ledger's answers, the told and
busy candidates, the follow-up queue).  Nothing a view returns can change the controller: collections come
back as tuples, frozensets or read-only mappings/arrays, and the view has no setters (its one store is
:meth:`SearchView.per_tell`'s cache of values derived from the told history, dropped at every tell).

The one piece of search state operators do change is the follow-up queue, and only from the ``on_*`` hooks
that :meth:`SearchController.tell` calls: each hook receives the :class:`FollowUps` object explicitly.  So
``ask`` (which only reads a view) stays a pure function of the told history plus the busy set.

A view is live, not a snapshot: while :meth:`SearchController.ask` fantasizes busy candidates, the view's
predictions and incumbent are the fantasized ones (that is what the operators must rank against).
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from infrarsi.controller.search.models import log_speedup
from infrarsi.controller.search.space import Candidate, Outcome, SearchSpace, Setting

if TYPE_CHECKING:  # pragma: no cover
    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.features import FeatureMap
    from infrarsi.controller.search.proposals import Pool

#: a conflict tuple of the failure ledger: settings that must not run together
Conflict = tuple[Setting, ...]


class FollowUps:
    """The operators' follow-up queue: ``(tag, candidate)`` in the order queued, plus every tag ever given.

    A tag is kept after its entry is dropped from the queue (:meth:`drop`), so a candidate is queued at most
    once per search.  Changed only inside ``tell`` (the ``on_*`` hooks of :mod:`proposals`).
    """

    __slots__ = ("items", "tags")

    def __init__(self) -> None:
        self.items: list[tuple[str, Candidate]] = []
        self.tags: dict[Candidate, str] = {}

    def add(self, tag: str, cand: Candidate) -> bool:
        """Queue ``cand`` under ``tag`` unless it was ever queued; True if it was added."""
        if cand in self.tags:
            return False
        self.items.append((tag, cand))
        self.tags[cand] = tag
        return True

    def drop(self, keep: Callable[[str, Candidate], bool]) -> None:
        """Remove the queued entries ``keep`` rejects (their tags stay)."""
        self.items = [(t, c) for t, c in self.items if keep(t, c)]


class SearchView:
    """Read-only queries operators may make of a :class:`SearchController` (see the module docstring)."""

    __slots__ = ("_c",)

    def __init__(self, ctrl: "SearchController") -> None:
        self._c = ctrl

    # ----------------------------------------------------------- fixed inputs
    @property
    def space(self) -> SearchSpace:
        """Knobs, patches and legality (an immutable dataclass)."""
        return self._c.space

    @property
    def reference(self) -> Candidate:
        """The reference configuration (every knob at its reference value, no patches)."""
        return self._c.reference

    @property
    def seed(self) -> int:
        return self._c.seed

    @property
    def t0(self) -> float:
        """The reference step time (s); ``log_speedup(t0, t)`` is a trial's ``y``."""
        return self._c.t0

    @property
    def gate(self) -> float:
        """The noise gate (log units) a move must clear to count as an improvement."""
        return self._c.gate

    @property
    def capacity(self) -> float:
        """Per-GPU memory capacity (GiB)."""
        return self._c.capacity

    @property
    def tune(self) -> Mapping[str, Any]:
        """The tuning constants (:data:`DEFAULT_TUNING` with overrides), read-only."""
        return types.MappingProxyType(self._c.tune)

    @property
    def experience(self) -> tuple[dict, ...]:
        """Experience records the controller was built with."""
        return tuple(self._c.experience)

    @property
    def transferred(self) -> Mapping[Setting, float]:
        """Settings whose prior came from experience measured elsewhere: their prior mean."""
        return types.MappingProxyType(self._c.transferred)

    @property
    def sign_unknown(self) -> Mapping[Setting, float]:
        """Settings measured elsewhere whose sign does not carry here: the largest |log-speedup| measured."""
        return types.MappingProxyType(self._c.sign_unknown)

    @property
    def prior_mu(self) -> np.ndarray:
        """Prior mean log-speedup per single feature (a read-only array, feature order)."""
        a = self._c.prior_mu.view()
        a.flags.writeable = False
        return a

    @property
    def fmap(self) -> "FeatureMap":
        """The feature columns (``index``, ``singles``, ``pairs``, ``dim``); read, never change."""
        return self._c.fmap

    @property
    def pool(self) -> "Pool":
        """The configuration pool (index arrays over the whole space, or a per-ask sample)."""
        return self._c.pool

    # --------------------------------------------------------- search state
    @property
    def starts(self) -> tuple[Candidate, ...]:
        return tuple(self._c.starts)

    @property
    def incumbent(self) -> Candidate:
        """The incumbent (within ``ask`` with busy candidates: the believed one, if any)."""
        return self._c.incumbent

    @property
    def incumbent_y(self) -> float:
        return self._c.incumbent_y

    @property
    def stall(self) -> int:
        """Non-improving tells since the last improvement (starts not counted)."""
        return self._c.stall

    @property
    def escape_stall(self) -> int:
        """The stall that drives escape mode: with ``stall_blind`` on, the non-improving tells of candidates asked
        after the last improvement was told (one asked before it never saw the incumbent it failed to beat)."""
        return self._c.seen_stall if self._c.tune["stall_blind"] else self._c.stall

    @property
    def history(self) -> tuple[tuple[Candidate, Outcome], ...]:
        """Every told ``(candidate, outcome)``, in tell order."""
        return tuple(self._c.history)

    @property
    def told(self) -> frozenset[Candidate]:
        return frozenset(self._c.told)

    @property
    def outstanding(self) -> tuple[Candidate, ...]:
        """Asked and not yet told, in ask order."""
        return tuple(self._c.outstanding)

    def per_tell(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, cached under ``key`` until the next tell.

        For values that depend on the told history alone (never on the busy set, the fantasized models or the
        ask's generator): operators ask them at every ask, and the history changes only in a tell."""
        tells, memo = self._c._tell_memo
        if tells != len(self._c.history):
            memo = {}
            self._c._tell_memo = (len(self._c.history), memo)
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def is_told(self, cand: Candidate) -> bool:
        return cand in self._c.told

    def is_outstanding(self, cand: Candidate) -> bool:
        return cand in self._c.outstanding

    @property
    def queue(self) -> tuple[tuple[str, Candidate], ...]:
        """Queued follow-ups ``(tag, candidate)`` in the order queued."""
        return tuple(self._c.followups.items)

    def followup_tag(self, cand: Candidate) -> str | None:
        """The tag ``cand`` was ever queued under (also after it left the queue), else None."""
        return self._c.followups.tags.get(cand)

    def measured_best(self) -> float:
        """The best measured log-speedup of an ok trial, 0 (the reference) if none is better: the measured
        incumbent, never a believed one."""
        ys = [log_speedup(self._c.t0, o.step_time_s) for _, o in self._c.history if o.status == "ok"]
        return max(0.0, float(max(ys)) if ys else 0.0)

    def active_tabu_moves(self) -> set[Setting]:
        return self._c.active_tabu_moves()

    # ------------------------------------------------------------ predictions
    def predict(self, cands: Sequence[Candidate]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean log-speedup, sd, p_feasible) for each candidate."""
        return self._c.predict(cands)

    def predict_rows(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean log-speedup, sd, p_feasible) for each encoded feature row of ``X``."""
        mu, sd = self._c.time.predict(X)
        return mu, sd, self._c.mem.p_feasible(X)

    def p_fit_rows(self, X: np.ndarray) -> np.ndarray:
        """p_feasible (memory) for each encoded feature row of ``X``."""
        return self._c.mem.p_feasible(X)

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of the time model's coefficients (feature order)."""
        return self._c.time.coef()

    def coef_sample(self, rng: np.random.Generator) -> np.ndarray:
        """One posterior draw of the time model's coefficients (feature order), busy trials fantasized as
        in every ask; deterministic in ``rng``.

        Optimistic on every feature a told trial that ran has measured (the draw never rates it below its
        posterior mean), plain on the others: a lever seen working stays in the drawn configuration unless the
        data rate it low, while an unmeasured one is drawn either way, which keeps the batch hedged against
        conflicts nothing has shown yet."""
        measured = self.per_tell("measured_features", self._c.measured_features)
        return self._c.time.coef_sample(rng, measured)

    def mem_delta(self, s: Setting) -> float:
        """Estimated peak-memory delta (GiB) of one setting vs the reference."""
        return self._c.mem_delta(s)

    def single_effects(self) -> dict[Setting, tuple[float, float, float]]:
        """Per single feature: (prior mean, posterior mean, posterior sd)."""
        return self._c.single_effects()

    def big_knobs(self) -> set[str]:
        """Knobs whose prior, posterior or measured single-knob effect clears the gate."""
        return self._c.big_knobs()

    # --------------------------------------------------------- failure ledger
    def blocked(self, settings: frozenset[Setting]) -> str | None:
        """Why a candidate with these settings must not run (banned tuple, banned patch, exclusion), or None."""
        return self._c.ledger.blocked(settings)

    def risk(self, s: Setting) -> float:
        """The ledger's risk of a setting (its prior mean log-speedup; |risk| ranks suspects)."""
        return self._c.ledger.risk(s)

    def minimal_tuple(self, settings: frozenset[Setting]) -> Conflict | None:
        """Smallest pair/triple of ``settings`` absent from every passing run (the ledger's suspect), or None."""
        return self._c.ledger.minimal_tuple(settings)

    @property
    def passing(self) -> tuple[frozenset[Setting], ...]:
        """Settings of every ok trial, in tell order."""
        return tuple(self._c.ledger.passing)

    @property
    def crash_records(self) -> tuple[frozenset[Setting], ...]:
        """Knob settings of every crashed or rejected trial without unverified patches, in tell order."""
        return tuple(self._c.ledger.crash_records)

    @property
    def conflicts(self) -> tuple[Conflict, ...]:
        """Banned tuples (derived from crashes) then known conflicts."""
        return tuple(self._c.ledger.banned) + tuple(self._c.ledger.known_conflicts)

    @property
    def requirements(self) -> tuple[tuple[Setting, Setting], ...]:
        """Requirements ``(s, r)``: ``s`` crashes without ``r`` (the failure ledger's own, then those another
        campaign pinned down, ``{"requires": ...}`` experience)."""
        return tuple(self._c.ledger.all_requirements())

    @property
    def suspects(self) -> tuple[Conflict, ...]:
        """Conflicts another campaign suspected that admission still avoids (``SearchController._suspected``)."""
        return tuple(self._c.active_suspects())

    @property
    def verified_patches(self) -> frozenset[str]:
        return frozenset(self._c.ledger.verified_patches)

    @property
    def banned_patches(self) -> Mapping[str, str]:
        """Patch -> the failure status that banned it."""
        return types.MappingProxyType(self._c.ledger.banned_patches)


def view_of(obj: "SearchView | SearchController") -> SearchView:
    """``obj`` itself if it is a view, else the controller's view (public operator functions accept both)."""
    return obj if isinstance(obj, SearchView) else obj.view
