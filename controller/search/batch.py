"""Filling parallel slots before any outcome is known: the starts interleaved with hedges of them.

With N slots the first N trials are chosen blind.  Filled with the three starts and then trust-region
neighbours of the (believed) first start, a whole first batch shares that start's most aggressive
settings, so one failure (a numerics rejection, a pair conflict) takes every slot down with it and the
first feedback-driven trial completes only after about N outcomes.

A *hedge* of a busy, not yet told start is what the search would propose if that start failed:
for a start that may not fit, its fastest variant that does (for a start that may also crash, that variant
with the riskiest setting switched as well); then the start with its riskiest setting
switched to the knob's best other value (the revert of
:func:`infrarsi.controller.search.proposals.on_crash`; risk is the failure ledger's own measure, the
prior |effect| of the setting, so the most aggressive setting is suspected first).  The first slots are
filled start 1, hedge 1 of start 1, start 2, hedge 2 of start 1, the contrarian probe, start 3, hedge 1
of start 2, so a failure of start 1 already has its fallback running and no start is pushed out of the first slots
(the contrarian probe moves before hedge 2 of start 1 unless hedge 1 is a double hedge:
:func:`starts_and_hedges`).  From five slots on, while most busy trials share settings no run has passed
with, a slot goes to the best configuration without them (:func:`shared_untested`).

Only busy starts are hedged: with nothing busy (``q = 1``) this yields exactly the starts, so the
one-at-a-time search is unchanged; once a start is told the queue's follow-ups take over.  Pure in the
controller's history and ``busy``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from infrarsi.controller.search.space import PATCH, Candidate, Setting, settings_key
from infrarsi.controller.search.view import SearchView, view_of

if TYPE_CHECKING:  # pragma: no cover
    from infrarsi.controller.search.controller import SearchController

#: p(fit) below which a start is hedged against an OOM first
SAFE_FIT = 0.8
#: a crash hedge may fit this much less likely than its start (the switch of an aggressive setting that also
#: saves a little memory, e.g. FP8 off, is still a hedge; one that costs much memory, e.g. fp32, is not)
FIT_SLACK = 0.1
#: a setting is hedged against a crash or rejection only when its prior |effect| is this many gates
AGGRESSIVE = 2.0
#: the start (index) after whose hedges, with anything busy, the contrarian probe comes
PROBES_AFTER = 1
#: busy trials from which a wave's shared untested settings get a slot without them (:func:`shared_untested`)
SPREAD_BUSY = 4
#: hedges per start, in slot order: (start index, hedge rank) after each start
HEDGE_PLAN: tuple[tuple[tuple[int, int], ...], ...] = (((0, 0),), ((0, 1),), ((1, 0),))


def hedges_of(ctrl: "SearchView | SearchController", start: Candidate, limit: int = 2) -> list[Candidate]:
    """Up to ``limit`` hedges of ``start`` (:func:`hedges_and_double`, without the flag)."""
    return hedges_and_double(ctrl, start, limit)[0]


def hedges_and_double(ctrl: "SearchView | SearchController", start: Candidate,
                     limit: int = 2) -> tuple[list[Candidate], bool]:
    """Up to ``limit`` hedges of ``start``, each ``start`` with one setting switched (the first, for a start
    with two failure modes, with two), in this order:

    * when the memory model doubts ``start`` (p(fit) < :data:`SAFE_FIT`), an OOM is a likely failure:
      first the fastest switch (posterior mean) that fits with p >= :data:`SAFE_FIT`, as bundle
      completion would propose after the OOM (the *memory-safe* hedge);
    * then the crash/rejection hedges: its settings by falling risk (prior |effect|, then canonical
      order), each switched to the knob's best other value by posterior mean (the reference last), as
      the conflict revert does, only for settings whose prior |effect| is at least :data:`AGGRESSIVE`
      gates (a space of mild levers has no prime suspect, and a hedge would only displace a trust-region
      pick); these must fit about as likely as ``start`` (up to :data:`SAFE_FIT`, less at most
      :data:`FIT_SLACK`: switching off an aggressive setting that saves a little memory, FP8 say, is still a
      crash hedge).
    * A start that risks both (a memory-safe hedge exists, and the first crash hedge still fits with
      p < :data:`SAFE_FIT`, so it inherits the start's OOM risk) gets the *double* hedge in the memory-safe
      hedge's place: the first crash hedge's switch on top of the memory-safe one (:func:`_on_safe`).  It
      survives either failure mode; the crash hedge alone still follows it (only if it fits with p >= 0.5:
      the switch may enter the double hedge below that, still within :data:`FIT_SLACK` of the start).

    Every hedge must be legal, not blocked by the failure ledger, fit with p >= 0.5 and be predicted to
    clear the measured incumbent by the gate, so it is worth a slot on its own.  Accepts the controller or
    its view.  Returns the hedges and whether the first is the double hedge (then the second, if any, is its
    crash switch alone)."""
    view = view_of(ctrl)
    coef, _ = view.coefficients()
    measured = view.measured_best()  # the measured incumbent, not a believed one
    p_start = float(view.predict([start])[2][0])
    sets = sorted((s for s in start.settings(view.space) if s[0] != PATCH),
                  key=lambda s: (-abs(view.risk(s)), settings_key(s)))
    switches: list[tuple[Candidate, float, float]] = []  # by falling risk, then the knob's best value first
    for s in sets:
        knob = view.space.knob(s[0])
        alts = sorted((v for v in knob.values if v not in (s[1], knob.reference)),
                      key=lambda v: (-coef[view.fmap.index[(knob.name, v)]], str(v)))
        for v in alts + [knob.reference]:
            alt = start.with_values({knob.name: v})
            if alt in view.starts or alt.is_reference(view.space) or not view.space.legal(alt.as_dict()):
                continue
            if view.blocked(alt.settings(view.space)) is not None:
                continue
            mu, _, p = view.predict([alt])
            if mu[0] >= measured + view.gate:  # p(fit) >= 0.5 for a hedge alone, checked below
                switches.append((alt, float(mu[0]), float(p[0])))
    safe: Candidate | None = None
    if p_start < SAFE_FIT:
        fits = sorted((t for t in switches if t[2] >= SAFE_FIT), key=lambda t: (-t[1], t[0].signature))
        safe = fits[0][0] if fits else None
    crash: list[tuple[Candidate, float]] = []  # (hedge, p(fit)) by falling risk of the switched setting
    done: set[str] = set()
    for alt, _, p in switches:
        knob = next(k for k in view.space.knobs if alt.value(k.name) != start.value(k.name))
        setting = next(x for x in start.settings(view.space) if x[0] == knob.name)
        if abs(view.risk(setting)) < AGGRESSIVE * view.gate:
            break  # settings by falling risk: the rest are too mild to be a failure's prime suspect
        if knob.name in done or p < min(p_start, SAFE_FIT) - FIT_SLACK:
            continue
        done.add(knob.name)
        crash.append((alt, p))
    # the double hedge composes the riskiest switch even where it is too likely to OOM on its own (p < 0.5):
    # on top of the memory-safe hedge it fits
    both = _on_safe(view, crash[0][0], safe, start, measured) if safe is not None and crash \
        and crash[0][1] < SAFE_FIT else None
    out: list[Candidate] = [both] if both is not None else [safe] if safe is not None else []
    for alt, p in crash:
        if alt not in out and p >= 0.5:
            out.append(alt)
    return out[:limit], both is not None


def _on_safe(view: SearchView, alt: Candidate, safe: Candidate, start: Candidate,
             measured: float) -> Candidate | None:
    """The crash hedge ``alt`` (``start`` with its suspect switched) on top of the memory-safe hedge ``safe``
    (``start`` with one other knob switched): both switches, so the hedge survives either failure mode of a
    start that risks an OOM and a crash at once.  None when the two switch the same knob or the composition
    is not worth a slot (illegal, blocked, a start, p(fit) < :data:`SAFE_FIT`, or not predicted to clear the
    measured incumbent by the gate)."""
    moved = {k.name: safe.value(k.name) for k in view.space.knobs if safe.value(k.name) != start.value(k.name)}
    if any(alt.value(name) != start.value(name) for name in moved):
        return None
    both = alt.with_values(moved)
    if both in view.starts or both.is_reference(view.space) or not view.space.legal(both.as_dict()) \
            or view.blocked(both.settings(view.space)) is not None:
        return None
    mu, _, p = view.predict([both])
    return both if p[0] >= SAFE_FIT and mu[0] >= measured + view.gate else None


def starts_and_hedges(view: SearchView, busy: set[Candidate],
                      probes: Callable[[], Iterable[tuple[str, Candidate]]] = lambda: ()) -> Iterator[tuple[str, Candidate]]:
    """The starts in order, each followed by the hedges :data:`HEDGE_PLAN` places after it; a hedge only
    while its start is busy (asked, not yet told).  With anything busy, ``probes()`` (the contrarian
    probe) comes right after the second start and before the second hedge of the first start (slot 4), a
    direction no start covers; unless the first start's first hedge is the double hedge: then its second is
    the double's crash switch alone, which keeps the memory-hungry settings the double gives up (the likelier
    peak when the crash switch was the cure), and keeps slot 4 (``bench/RESULTS.md``, session 30)."""
    cache: dict[int, tuple[list[Candidate], bool]] = {}  # start index -> (hedges, the first is a double hedge)

    def hedged(j: int) -> tuple[list[Candidate], bool]:
        if j not in cache:
            cache[j] = hedges_and_double(view, view.starts[j])
        return cache[j]
    for i, start in enumerate(view.starts):
        yield "start", start
        plan = [(j, rank) for j, rank in (HEDGE_PLAN[i] if i < len(HEDGE_PLAN) else ())
                if j < len(view.starts) and view.starts[j] in busy and not view.is_told(view.starts[j])]
        probe_here = i == PROBES_AFTER and bool(busy)
        early = probe_here and any(rank > 0 and not hedged(j)[1] for j, rank in plan)
        if early:
            yield from probes()
        for j, rank in plan:
            hedges = hedged(j)[0]
            if rank < len(hedges):
                yield "hedge", hedges[rank]
        if probe_here and not early:
            yield from probes()


def shared_untested(ctrl: "SearchView | SearchController", busy: set[Candidate], share: float) -> list[Setting]:
    """The knob settings held by at least ``share`` of the busy candidates that no passing run has held, in
    canonical order; empty below :data:`SPREAD_BUSY` busy (so never with four slots or fewer).

    A wave whose trials mostly hold the same untested settings is one failure away from losing most of its
    slots: a crash or rejection any of them causes (alone or with a partner no start knows of) takes every
    holder down, and failures end early, so they complete first and count first.  The search then gives a
    slot to the best configuration holding none of them (``proposals._unshared``, tuning key
    ``spread_wave``): it is weaker by prediction, but it survives whichever of those settings is the cause and
    measures the levers the wave left out (``bench/RESULTS.md``, session 31).  Accepts the controller or its
    view."""
    if len(busy) < SPREAD_BUSY:
        return []
    view = view_of(ctrl)
    counts: dict[Setting, int] = {}
    for b in busy:
        for s in b.settings(view.space):
            if s[0] != PATCH:
                counts[s] = counts.get(s, 0) + 1
    held = frozenset().union(*view.passing) if view.passing else frozenset()
    return sorted((s for s, n in counts.items() if n >= share * len(busy) and s not in held), key=settings_key)
