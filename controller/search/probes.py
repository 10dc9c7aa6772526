"""Which settings the search has tried, and the probes that reach levers the pool would not (paper 4.3).

:func:`tried` / :func:`probed` say which settings are measured or being measured (a probe lost with its failing
base is probed again); :func:`contrarian` yields the contrarian probe, the probe of a lever whose sign did not
transfer from other hardware, and the test of a suspected conflict (:data:`SUSPECT_TEST`, which admission lets
hold one suspect).  Pure in the view and the busy set.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from infrarsi.controller.search.moves import with_setting
from infrarsi.controller.search.space import PATCH, Candidate, Setting, settings_key
from infrarsi.controller.search.view import Conflict, SearchView


def tried(view: SearchView, busy: set[Candidate] = frozenset()) -> set[Setting]:
    """Settings measured or being measured: those of every outstanding or otherwise busy (pending, in this
    batch) candidate and of every told one, except a setting of a failed trial whose failure its base explains.

    A probe adds one setting to a base (the contrarian probe and a patch probe: the believed incumbent, often a
    start still running).  When the base itself failed the same way, without that setting, the probe's failure
    says nothing of the setting (the ledger does not blame a patch for it either), and counting the setting as
    tried would lose its lever for good: it is untried again and probed once more on the next incumbent.  A
    setting whose probe failed on a base that did not fail stays tried (at most one re-probe per base failure).
    """
    return probed(view, busy)[0]


def probed(view: SearchView, busy: set[Candidate]) -> tuple[set[Setting], set[Setting]]:
    """(tried, lost): :func:`tried`, and the settings held only by failed trials whose failure their base
    explains (probed again, after every setting never tried at all: a lost probe waits behind the fresh ones)."""
    told_seen, told_lost = view.per_tell("probed", lambda: _told_probes(view))
    seen = set(told_seen)
    for c in list(view.outstanding) + sorted(busy, key=lambda c: c.signature):
        seen |= c.settings(view.space)
    return seen, set(told_lost) - seen


def _told_probes(view: SearchView) -> tuple[frozenset[Setting], frozenset[Setting]]:
    """(tried, lost) over the told history alone (see :func:`probed`; quadratic in the tells, so cached
    per tell)."""
    seen: set[Setting] = set()
    history = view.history
    failed = [(c.settings(view.space), o.status) for c, o in history if o.status != "ok"]
    lost: set[Setting] = set()
    for c, o in history:
        sets = c.settings(view.space)
        if o.status == "ok":
            seen |= sets
            continue
        alike = [f for f, st in failed if st == o.status and f and f < sets]  # candidate bases of this failure
        for s in sets:
            explained = any(s not in f for f in alike)
            (lost if explained else seen).add(s)
    return frozenset(seen), frozenset(lost)


#: the operator tag of a suspect test (:func:`contrarian`): admission lets its candidate hold a suspected conflict
SUSPECT_TEST = "suspect-test"


def contrarian(view: SearchView, busy: set[Candidate] = frozenset()) -> Iterator[tuple[str, Candidate]]:
    """Untried settings the prior (stated, or transferred from experience measured elsewhere) rates low (<= 0)
    yet whose two-sigma upside clears the gate (one lost with a failing base after the never-tried ones).

    A setting measured elsewhere by at least the gate whose sign does not carry here (``view.sign_unknown``: a
    balance or FP8 effect from another GPU SKU) is probed the same way while its prior stays at or below 0 and a
    conflict (known, banned or suspected by another campaign) keeps it from a setting the incumbent holds: the
    pool reaches it only by giving up that partner's measured gain, so it would be tried late or never, though
    it mattered on other hardware and may be the biggest lever here (the larger |effect| first among equal
    upsides; the probe switches the partner off, :func:`with_setting`).

    After those, a *suspect test*: an untried setting that nothing rates harmful (prior >= 0), whose upside clears
    the gate, or (after a stall of twice the escape patience) a tried one measured here above the gate, which
    only a suspected conflict (another campaign's unproven blame, ``view.suspects``) keeps from the incumbent is
    tried on the incumbent *with* the suspected partner.  A wrong suspect would otherwise keep a lever out of the search for good (nothing here ever crashes
    on it, so nothing lifts it); a crash costs one early-ending trial and confirms the ban, a passing run lifts it."""
    seen, lost = probed(view, busy)
    held = view.incumbent.settings(view.space)

    def kept_apart(s: Setting, tuples: Iterable[Conflict]) -> bool:  # a tuple holds s and incumbent settings only
        return any(s in t and all(o == s or o in held for o in t) for t in tuples)

    suspects = view.suspects
    apart = view.conflicts + suspects
    unsigned = {s: g for s, g in view.sign_unknown.items() if kept_apart(s, apart)}
    picks, tests = [], []
    for s, (prior, post, sd) in view.single_effects().items():
        if s[0] == PATCH or post + 2 * sd < view.gate:
            continue
        if s in seen:  # measured helpful here, kept from the incumbent only by a suspect: test that suspect
            if post >= view.gate and s not in held and kept_apart(s, suspects) \
                    and view.stall >= 2 * int(view.tune["stall_trials"]):
                tests.append((True, -(post + 2 * sd), settings_key(s), s))
            continue
        k = view.space.knob(s[0])
        stated = bool(k.prior_mean) and s[1] in k.prior_mean
        elsewhere = unsigned.get(s, 0.0) >= view.gate
        if (stated or s in view.transferred or elsewhere) and prior <= 0:
            picks.append((s in lost, -(post + 2 * sd), -unsigned.get(s, 0.0), settings_key(s), s))
        elif prior >= 0 and not elsewhere and kept_apart(s, suspects):
            tests.append((s in lost, -(post + 2 * sd), settings_key(s), s))
    for *_, s in sorted(picks)[:1]:
        yield "contrarian", with_setting(view, view.incumbent, s, suspects=s in unsigned)
    for *_, s in sorted(tests)[:1]:
        yield SUSPECT_TEST, view.incumbent.with_values({s[0]: s[1]})
