"""Candidate-building moves shared by the proposal operators (:mod:`proposals`, :mod:`probes`, :mod:`refine`).

Each takes the read-only :class:`~infrarsi.controller.search.view.SearchView` and a base candidate and returns a
new candidate; nothing here mutates and nothing filters by admission (the controller's ``admissible`` does).
"""

from __future__ import annotations

from infrarsi.controller.search.space import PATCH, Candidate, Setting, settings_key
from infrarsi.controller.search.view import SearchView


def legal_unblocked(view: SearchView, cand: Candidate) -> bool:
    return view.space.legal(cand.as_dict()) and view.blocked(cand.settings(view.space)) is None


def with_setting(view: SearchView, base: Candidate, s: Setting, suspects: bool = False) -> Candidate:
    """``base`` plus setting ``s``, reverting settings banned together with ``s`` (``suspects``: also those another
    campaign suspected together with it), adding what ``s`` was found to need (a requirement ``(s, r)`` of the
    failure ledger: the partner ``r``, unless that brings a ban back) and a saver if needed."""
    if s[0] == PATCH:
        return Candidate(base.config, base.patches | {s[1]})
    cand = base.with_values({s[0]: s[1]})
    sets = cand.settings(view.space)
    for t in view.conflicts + (view.suspects if suspects else ()):
        if s in t and set(t) <= sets:
            for other in t:
                if other != s and other[0] != PATCH:
                    cand = cand.with_values({other[0]: view.space.knob(other[0]).reference})
    for need, partner in view.requirements:
        if need == s and partner[0] != PATCH and partner not in cand.settings(view.space):
            with_partner = cand.with_values({partner[0]: partner[1]})
            if not any(set(t) <= with_partner.settings(view.space) for t in view.conflicts):
                cand = with_partner
    if float(view.predict([cand])[2][0]) < 0.5:
        saver = best_saver(view, cand)
        if saver is not None:
            cand = cand.with_values({saver[0]: saver[1]})
    return cand


def saver_options(view: SearchView, cand: Candidate, exclude: set[str] = frozenset()) -> list[tuple[Setting, float, float]]:
    """Reference-held savers for ``cand``: (setting, GiB saved, posterior speed coef), best first."""
    d = cand.as_dict()
    coef, _ = view.coefficients()
    out = []
    for k in view.space.knobs:
        if d[k.name] != k.reference or k.name in exclude:
            continue
        for v in k.values:
            if v == k.reference:
                continue
            delta = view.mem_delta((k.name, v))
            if delta < 0:
                out.append(((k.name, v), -delta, float(coef[view.fmap.index[(k.name, v)]])))
    out.sort(key=lambda t: (-t[2], -t[1], settings_key(t[0])))
    return out


def best_saver(view: SearchView, cand: Candidate) -> Setting | None:
    opts = saver_options(view, cand)
    return opts[0][0] if opts else None


def savers_for(view: SearchView, cand: Candidate, need_gib: float) -> Candidate:
    """``cand`` with reference-held savers added until their estimated savings reach ``need_gib``.

    Each round considers the savers whose posterior speed coefficient is within half a gate of the best one.
    Of those that cover the remaining need alone, each knob offers its value nearest the reference (TP2 before
    TP4: the smaller step from what was measured), and the one saving the most is taken; when none covers it
    alone, the one saving the most.  A saver the failure ledger (or a known conflict) blocks beside ``cand`` is
    never taken.  Unchanged when ``need_gib <= 0`` or no saver is left."""
    used: set[str] = set()
    for _ in range(4):
        if need_gib <= 0:
            break
        opts = [o for o in saver_options(view, cand, used)
                if view.blocked(cand.with_values({o[0][0]: o[0][1]}).settings(view.space)) is None]
        if not opts:
            break
        top = opts[0][2]
        near = [o for o in opts if o[2] >= top - view.gate / 2]
        enough = [o for o in near if o[1] >= need_gib]
        if enough:
            step = {o[0]: _steps_from_reference(view, o[0]) for o in enough}
            nearest = {k: min(step[o[0]] for o in enough if o[0][0] == k) for k in {o[0][0] for o in enough}}
            near = [o for o in enough if step[o[0]] == nearest[o[0][0]]]
        s, saved, _ = max(near, key=lambda o: (o[1], settings_key(o[0])))
        used.add(s[0])
        cand = cand.with_values({s[0]: s[1]})
        need_gib -= saved
    return cand


def _steps_from_reference(view: SearchView, s: Setting) -> int:
    """How many values an ordered knob's setting lies from its reference (1 for any setting of an unordered one)."""
    k = view.space.knob(s[0])
    return abs(k.values.index(s[1]) - k.values.index(k.reference)) if k.ordered else 1


def complete_bundle(view: SearchView, cand: Candidate, skip: set[Setting]) -> tuple[Candidate, Setting | None]:
    """Add reference-held savers (fastest first) until the memory model predicts a fit."""
    first = None
    used: set[str] = set()
    for _ in range(4):
        if float(view.predict([cand])[2][0]) >= 0.6:
            break
        opts = [o for o in saver_options(view, cand, used) if o[0] not in skip]
        if not opts:
            break
        s = opts[0][0]
        first = first or s
        used.add(s[0])
        cand = with_setting(view, cand, s)
    return cand, first
