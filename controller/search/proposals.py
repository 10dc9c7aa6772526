"""Proposal operators of the search controller (paper sections 4.1-4.3).

``propose`` yields ``(operator, candidate)`` in priority order; the controller
filters each through ``admissible`` (visited, tabu, bans, legality, memory
partners) and keeps the first admissible one per slot (the controller fills
slots one at a time, each with the busy set: running, pending and this batch's
earlier slots).  Operators, in order: the three starts;
queued follow-ups derived from tells (bundle completion, conflict
backtracking and migration, ordered-axis extrapolation, conflict reverts, and with the
``split_doubtful`` key splits of a joint improvement, :func:`on_joint_improvement`);
one contrarian probe (with experience also a probe of a lever whose sign did
not transfer, or a test of a suspected conflict, :func:`contrarian`); patch
stacking and patch exploration; when stalled on an incumbent from
transferred experience, the refine sweep of its uncovered levers
(:mod:`refine`); warm restarts and trust-region escape over the
big-knob set when stalled (:attr:`SearchView.escape_stall`: trials asked before the
last improvement was told are no stall there), else the normal trust region; finally the whole
pool by acquisition.  Nothing here mutates
the controller: operators see it through a read-only
:class:`~infrarsi.controller.search.view.SearchView`, and only the ``on_*`` hooks, which run inside
``tell``, change anything: the follow-up queue (:class:`~infrarsi.controller.search.view.FollowUps`)
they are handed.

With busy candidates: queued follow-ups one move from a busy follow-up wait,
ranked pool candidates one knob from a busy one come last, "tried" counts the
busy ones (contrarian and patch probes spread out) but not a probe that failed
with its failing base (:func:`probes.tried`: it is probed again), with three or more
busy one patch probe may run beside them, with four or more busy, most of which share settings no run has
passed with, the best configuration without those (:func:`_unshared`, before the contrarian probe), with two
or more busy the stacked move (:func:`_stacked`: the best-predicted configuration beyond the
trust radius, every lever the model rates positive in one trial) and with six
or more a Thompson draw (:func:`_thompson`) come before the escape and the
trust region.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from infrarsi.controller.search import batch, refine
from infrarsi.controller.search.models import stable
from infrarsi.controller.search.moves import best_saver, complete_bundle, legal_unblocked, savers_for
from infrarsi.controller.search.probes import contrarian, probed, tried
from infrarsi.controller.search.space import PATCH, Candidate, Outcome, Setting, settings_key
from infrarsi.controller.search.view import FollowUps, SearchView, view_of

if TYPE_CHECKING:  # pragma: no cover
    from infrarsi.controller.search.controller import SearchController


#: the share of capacity an experience start's measured bundle memory (reference peak plus the bundle's delta)
#: may fill before savers are added to it
START_MEM_SHARE = 0.95


class Pool:
    """All knob configurations (or a per-ask sample when the space is too large) as index arrays."""

    def __init__(self, view: SearchView):
        self.view = view
        space = view.space
        self.knobs = space.knobs
        self.sizes = [len(k.values) for k in self.knobs]
        self.ref_idx = np.array([k.values.index(k.reference) for k in self.knobs])
        self.col = {}  # (knob j, value index) -> feature column
        for j, k in enumerate(self.knobs):
            for vi, v in enumerate(k.values):
                if v != k.reference:
                    self.col[(j, vi)] = view.fmap.index[(k.name, v)]
        n = int(np.prod(self.sizes)) if self.sizes else 1
        self.full = n <= int(view.tune["pool_limit"])
        self.rows_all = None
        if self.full:
            rows = np.array(list(np.ndindex(*self.sizes)), dtype=int).reshape(n, len(self.knobs))
            legal = np.array([space.legal(self.to_dict(r)) for r in rows], dtype=bool)
            self.rows_all = rows[legal]

    def to_dict(self, row: np.ndarray) -> dict:
        return {k.name: k.values[int(row[j])] for j, k in enumerate(self.knobs)}

    def to_candidate(self, row: np.ndarray, patches=frozenset()) -> Candidate:
        return Candidate.from_dict(self.to_dict(row), patches)

    def row_of(self, cand: Candidate) -> np.ndarray:
        d = cand.as_dict()
        return np.array([k.values.index(d[k.name]) for k in self.knobs])

    def rows(self, rng: np.random.Generator) -> np.ndarray:
        if self.full:
            return self.rows_all
        m = int(self.view.tune["pool_sample"])
        rows = np.column_stack([rng.integers(0, s, m) for s in self.sizes]) if self.sizes else np.zeros((1, 0), int)
        near = [self.row_of(self.view.incumbent)]
        for j, s in enumerate(self.sizes):
            for v in range(s):
                r = near[0].copy()
                r[j] = v
                near.append(r)
        return np.unique(np.vstack([rows] + near), axis=0)

    def features(self, rows: np.ndarray, patches: frozenset[str]) -> np.ndarray:
        fm = self.view.fmap
        X = np.zeros((rows.shape[0], fm.dim))
        for (j, vi), c in self.col.items():
            X[:, c] = rows[:, j] == vi
        for p in patches:
            if (PATCH, p) in fm.index:
                X[:, fm.index[(PATCH, p)]] = 1.0
        for i, (a, b) in enumerate(fm.pairs):
            ca, cb = fm.index.get(a), fm.index.get(b)
            if ca is not None and cb is not None:
                X[:, len(fm.singles) + i] = X[:, ca] * X[:, cb]
        return X

    def score(self, rows: np.ndarray, patches: frozenset[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(acquisition, mean, sd, p_feasible) per row.

        The acquisition is the optimistic gain over the incumbent, weighted by the memory model:
        ``p * (mu + beta * sd - incumbent_y) - (1 - p) * fail_penalty``.  A likely OOM forfeits the gain the
        row could show, plus the penalty, not the incumbent's whole level: weighting the absolute upper bound
        by ``p`` made a 30% OOM risk outweigh any gain once the incumbent was high (a move from a 1.68x
        incumbent to the 1.82x peak, at p = 0.68, ranked below every safe move that kept 1.68x)."""
        tune = self.view.tune
        X = self.features(rows, patches)
        mu, sd, p = self.view.predict_rows(X)
        gain = mu + float(tune["beta"]) * sd - self.view.incumbent_y
        acq = p * gain - (1 - p) * float(tune["fail_penalty"])
        return acq, mu, sd, p


def initial_starts(view: SearchView) -> list[Candidate]:
    """The three starts: experience best, prior best differing in a big knob, random legal."""
    pool = view.pool
    rng = np.random.default_rng([view.seed, 7919])
    prior_big = {s[0] for s, m in zip(view.fmap.singles, view.prior_mu) if s[0] != PATCH and abs(m) >= view.gate}
    starts: list[Candidate] = []
    exp = [r for r in view.experience if "config" in r]
    if exp:
        best = max(exp, key=lambda r: float(r.get("speedup", 1.0)))
        d = view.space.reference_config()
        for k in view.space.knobs:
            v = best["config"].get(k.name, k.reference)
            d[k.name] = v if v in k.values else k.reference
        cand = Candidate.from_dict(d)
        need = _bundle_shortfall(view, best)
        if need > 0:  # the bundle, as measured elsewhere, would not fit here (the additive model may miss it)
            cand = savers_for(view, cand, need)
        elif float(view.predict([cand])[2][0]) < 0.5:  # measured elsewhere, maybe with more memory: add a saver
            saver = best_saver(view, cand)
            if saver is not None:
                cand = cand.with_values({saver[0]: saver[1]})
        if not cand.is_reference(view.space) and legal_unblocked(view, cand):
            starts.append(cand)
    sample = pool.rows(rng)
    X = pool.features(sample, frozenset())
    prior_score = X[:, : len(view.prior_mu)] @ view.prior_mu
    feas = view.p_fit_rows(X) >= 0.5
    order = np.lexsort((np.arange(len(sample)), -prior_score))
    for want in range(2 - len(starts)):
        for i in order:
            if not feas[i] or prior_score[i] <= 0:
                continue
            cand = pool.to_candidate(sample[i])
            if cand in starts or not legal_unblocked(view, cand):
                continue
            if starts and prior_big and not any(cand.value(k) != s.value(k) for s in starts for k in prior_big):
                continue
            starts.append(cand)
            break
    for _ in range(1000):
        row = np.array([rng.integers(0, s) for s in pool.sizes], dtype=int)
        cand = pool.to_candidate(row)
        if cand not in starts and not cand.is_reference(view.space) and legal_unblocked(view, cand):
            starts.append(cand)
            break
    return starts


def _bundle_shortfall(view: SearchView, start: dict) -> float:
    """GiB by which an experience start's bundle, at its measured memory, overshoots :data:`START_MEM_SHARE` of
    this capacity: the reference peak here plus the record's ``mem_delta_gib`` minus this model's estimates of the
    settings the start left out (``mem_dropped``); 0 when the record or the reference peak is unknown.

    It can only add savers: where it predicts a fit and the additive model an OOM, the additive model still
    decides, since the estimates of dropped settings are additive too (a dropped TP2 with micro-batch 4 saves
    more than its prior says)."""
    ref_mem = view.tune["reference_peak_mem_gib"]
    if "mem_delta_gib" not in start or ref_mem is None:
        return 0.0
    kept = float(start["mem_delta_gib"]) - sum(view.mem_delta((k, v)) for k, v in start.get("mem_dropped", ())
                                               if (k, v) in view.fmap.index)
    return max(0.0, float(ref_mem) + kept - START_MEM_SHARE * view.capacity)


def on_oom(view: SearchView, followups: FollowUps, cand: Candidate, outcome: Outcome, prev_pred: float) -> None:
    """Bundle completion for a high-upside OOM: pair with savers covering the shortfall."""
    if cand.patches or prev_pred < max(view.incumbent_y, view.gate):
        return
    skip: set[Setting] = set()
    for _ in range(2):
        bundle, first = complete_bundle(view, cand, skip)
        if first is None:
            break
        _enqueue(view, followups, "bundle", bundle)
        skip.add(first)


def on_crash(view: SearchView, followups: FollowUps, cand: Candidate) -> None:
    """Conflict backtracking and a one-step switch of the banned tuple's most suspect member.

    Backtracking re-tests a high-prior lever alone on the clean reference when it crashed on top of
    the accepted incumbent (at most two new settings), or when it never passed and appears in two or
    more crash records.  The switch replaces the suspect setting with the knob's best other value
    (by posterior mean; the reference if none is admissible); switches do not chain.
    """
    sets = frozenset(x for x in cand.settings(view.space) if x[0] != PATCH)
    new = sets - view.incumbent.settings(view.space)
    passed = set().union(*view.passing) if view.passing else set()
    t = view.minimal_tuple(sets) or ()
    for s in sorted(sets, key=settings_key):
        high = view.space.knob(s[0]).prior_of(s[1]) >= view.gate
        repeated = s in t and s not in passed and sum(1 for r in view.crash_records if s in r) >= 2
        if (high and s in new and len(new) <= 2) or (repeated and len(sets) > 1):
            _enqueue(view, followups, "backtrack", view.reference.with_values({s[0]: s[1]}))
    if view.followup_tag(cand) == "revert" or len(t) < 2:
        return
    seen = {x: sum(1 for p in view.passing if x in p) for x in t}
    suspect = min(t, key=lambda x: (seen[x], -abs(view.risk(x)), settings_key(x)))
    knob = view.space.knob(suspect[0])
    coef, _ = view.coefficients()
    alts = sorted((v for v in knob.values if v not in (suspect[1], knob.reference)),
                  key=lambda v: -coef[view.fmap.index[(knob.name, v)]])
    for v in alts + [knob.reference]:
        alt = cand.with_values({knob.name: v})
        if view.blocked(alt.settings(view.space)) is None and view.space.legal(alt.as_dict()):
            _enqueue(view, followups, "revert", alt)
            break


def on_backtrack_ok(view: SearchView, followups: FollowUps, cand: Candidate, incumbent: Candidate) -> None:
    """A lever verified on the clean reference: migrate ``incumbent``'s compatible settings on top of it."""
    (s,) = tuple(cand.settings(view.space)) or (None,)
    if s is None:
        return
    migrated = cand
    for other in sorted(incumbent.settings(view.space), key=settings_key):
        if other[0] in (s[0], PATCH):
            continue
        trial = migrated.with_values({other[0]: other[1]})
        if view.blocked(trial.settings(view.space)) is None:
            migrated = trial
    _enqueue(view, followups, "migrate", Candidate(migrated.config, incumbent.patches))


def on_improvement(view: SearchView, followups: FollowUps, old: Candidate, new: Candidate,
                   extrapolate: bool = True) -> None:
    """Extrapolate one step further along every ordered axis the improving move changed (unless
    ``extrapolate`` is false).

    Extrapolations and splits queued from an earlier incumbent are dropped (they are stale).
    """
    followups.drop(lambda t, c: t not in ("extrapolate", "split") or view.is_told(c))
    if not extrapolate:
        return
    for k in view.space.knobs:
        if not k.ordered:
            continue
        a, b = k.values.index(old.value(k.name)), k.values.index(new.value(k.name))
        if a != b:
            c = b + (1 if b > a else -1)
            if 0 <= c < len(k.values):
                _enqueue(view, followups, "extrapolate", new.with_values({k.name: k.values[c]}))


def on_joint_improvement(view: SearchView, followups: FollowUps, old: Candidate, new: Candidate) -> None:
    """Split a joint improvement: when a move from ``old`` changed two or more settings and improved, each
    *doubtful* setting it introduced (never measured here before, no prior above 0: a sign-unknown lever, such as
    a parallel degree whose record came from another GPU) is queued for removal, ``new`` with that knob back at
    ``old``'s value.  One run cannot tell which of the settings paid: without the split a hitchhiker that costs
    (TP2 beside FP8 on Gemma 9B L40S -> H200) stays in the incumbent and every later move is centred on it."""
    changed = [k.name for k in view.space.knobs if old.value(k.name) != new.value(k.name)]
    if len(changed) < 2:
        return
    seen: set[Setting] = set()
    for c, o in view.history:
        if o.status == "ok" and c != new:
            seen |= c.settings(view.space)
    effects = view.single_effects()
    for name in changed:
        s = (name, new.value(name))
        if s in seen or s not in effects or effects[s][0] > 0:
            continue
        _enqueue(view, followups, "split", new.with_values({name: old.value(name)}))


#: queue priority per follow-up kind (lower first; newest first within one priority)
PRIORITY = {"bundle": 0, "revert": 0, "migrate": 0, "extrapolate": 1, "backtrack": 1, "split": 1}


def _enqueue(view: SearchView, followups: FollowUps, tag: str, cand: Candidate) -> None:
    if not view.is_told(cand):
        followups.add(tag, cand)


def _patch_ops(view: SearchView, upside_low: bool,
               busy: set[Candidate] = frozenset()) -> Iterator[tuple[str, Candidate]]:
    coef, _ = view.coefficients()
    inc = view.incumbent
    verified, banned = view.verified_patches, view.banned_patches
    small = [p for p in sorted(verified - inc.patches) if p not in banned
             and coef[view.fmap.index[(PATCH, p)]] > 0]
    replaces = view.tune["patch_replaces"] or {}
    if replaces:  # never stack a patch with the completion that already combines it
        covered = {r for p in inc.patches | set(small) for r in replaces.get(p, ())}
        small = [p for p in small if p not in covered]
    # two or more verified gains stack even below the gate: patches tried side by side (batch or
    # asynchronous slots) were each measured on the same incumbent and never met on top of each other;
    # with three or more trials busy a slot is cheap, and once no patch probe is running (none could
    # join it a tell later) one verified gain below the gate stacks too: measured beside the patch the
    # incumbent took, it would otherwise never join it
    cheap = len(busy) >= 3
    probing = any(b.patches - verified for b in busy)
    if len(small) >= 2 or (small and ((cheap and not probing)
                                      or sum(coef[view.fmap.index[(PATCH, p)]] for p in small) >= view.gate)):
        yield "stack", Candidate(inc.config, inc.patches | set(small))
    # with three or more trials busy one unverified patch probe may run beside them even while the knobs
    # still promise more (never two at once)
    side_probe = cheap and not probing
    if not upside_low and not side_probe:
        return
    seen, lost = probed(view, busy)
    untested = [p for p in view.space.patches if (PATCH, p) not in seen and p not in banned]
    prior = view.tune["patch_priors"] or {}
    order = sorted(untested, key=lambda p: ((PATCH, p) in lost, -float(prior.get(p, 0.0)), p))
    for p in order[: None if upside_low else 1]:
        # a completion of a stack (proposer "complete" request) is tried in place of the patches it combines
        yield "patch", Candidate(inc.config, (inc.patches - set(replaces.get(p, ()))) | {p})


def config_upside(ctrl: "SearchView | SearchController") -> float:
    """Two-sigma upside of the configuration proposals over the incumbent: the largest ``mu + 2 sd`` of a likely
    feasible configuration (incumbent's patches, at least one knob away) minus the incumbent's log-speedup.
    The same quantity :func:`propose` compares with the gate (paper 4.3); deterministic in the history.
    Accepts the controller or its view."""
    view = view_of(ctrl)
    pool = view.pool
    rows = pool.rows(np.random.default_rng([view.seed, len(view.history), 0]))
    inc = view.incumbent
    _, mu, sd, p = pool.score(rows, inc.patches)
    dist = (rows != pool.row_of(inc)).sum(axis=1)
    ok = p >= float(view.tune["min_p_feasible"])
    return float(np.max(np.where(ok & (dist > 0), mu + 2 * sd, -np.inf), initial=-np.inf)) - view.incumbent_y


def untested_patches(ctrl: "SearchView | SearchController", busy: set[Candidate] = frozenset()) -> list[str]:
    """Patches of the space not yet tried (told, outstanding or busy) and not banned.  Accepts the controller
    or its view."""
    view = view_of(ctrl)
    seen = {s[1] for s in tried(view, busy) if s[0] == PATCH}
    return [p for p in view.space.patches if p not in seen and p not in view.banned_patches]


def _class(view: SearchView, c: Candidate, big: list[str]) -> tuple:
    return tuple(str(c.value(k)) for k in big)


def _near(view: SearchView, a: Candidate, b: Candidate) -> bool:
    """At most one knob or patch apart."""
    return len(a.settings(view.space) ^ b.settings(view.space)) <= 2 and \
        sum(a.value(k.name) != b.value(k.name) for k in view.space.knobs) + len(a.patches ^ b.patches) <= 1


def _stacked(view: SearchView, rows: np.ndarray, mu: np.ndarray, p: np.ndarray, dist: np.ndarray,
             crowded: np.ndarray, inc: Candidate) -> Iterator[tuple[str, Candidate]]:
    """With slots busy: the configuration of highest posterior mean anywhere (likely to fit), when it lies
    beyond the trust radius of the incumbent and is predicted to clear it by the gate.  It stacks every lever
    the model rates clearly positive in one trial, a move the one-knob-at-a-time climb reaches only after a
    feedback round per lever; a trial worth its slot whatever the busy ones return.  Only with
    :data:`STACK_BUSY` or more trials busy (a feedback round then costs that many completions)."""
    ok = (p >= SAFE_STACK_FIT) & (dist > int(view.tune["trust_radius"])) & ~crowded
    if ok.any():
        yield from _best_clearing(view, rows, mu, ok, inc, "stacked")


def _thompson(view: SearchView, rows: np.ndarray, p: np.ndarray, dist: np.ndarray, crowded: np.ndarray,
              inc: Candidate, rng: np.random.Generator) -> Iterator[tuple[str, Candidate]]:
    """With nearly every slot busy: the best configuration under one posterior draw of the time model
    (Thompson sampling), likely to fit and not one knob from a busy candidate, when the draw rates it the
    gate above the incumbent.  The busy trials are fantasized at their predicted means, so the draw is
    wide where nothing runs: successive free slots spread over the configurations the model cannot yet
    rule out, where trust-region picks would queue up one feedback round each.  The draw is optimistic on
    levers a completed trial has measured (:meth:`SearchView.coef_sample`), so a draw does not drop a lever
    seen working by chance.  Only with :data:`THOMPSON_BUSY` or more busy.  Pure in the history, the busy
    set and ``rng`` (the ask's)."""
    ok = (p >= SAFE_STACK_FIT) & (dist > 0) & ~crowded
    if ok.any():  # checked before drawing: the draw consumes the ask's generator
        draw = stable(view.pool.features(rows, inc.patches) @ view.coef_sample(rng))
        yield from _best_clearing(view, rows, draw, ok, inc, "thompson")


def _unshared(view: SearchView, rows: np.ndarray, mu: np.ndarray, p: np.ndarray, busy: set[Candidate],
              inc: Candidate) -> Iterator[tuple[str, Candidate]]:
    """With :data:`batch.SPREAD_BUSY` or more busy, most of them (the ``spread_wave`` share) holding settings
    no run has passed with (:func:`batch.shared_untested`): the configuration of highest posterior mean, likely
    to fit (p >= :data:`SAFE_STACK_FIT`), that holds none of them, when it clears the *measured* incumbent by
    the gate (the believed one is a busy trial's prediction, which this slot insures against)."""
    shared = batch.shared_untested(view, busy, float(view.tune["spread_wave"]))
    if not shared:
        return
    ok = p >= SAFE_STACK_FIT
    for name, value in shared:
        j = next(i for i, k in enumerate(view.pool.knobs) if k.name == name)
        ok &= rows[:, j] != view.pool.knobs[j].values.index(value)
    idx = np.flatnonzero(ok)
    if idx.size:
        i = idx[np.lexsort((idx, -mu[idx]))][0]
        if mu[i] >= view.measured_best() + view.gate:
            yield "unshared", view.pool.to_candidate(rows[i], inc.patches)


def _best_clearing(view: SearchView, rows: np.ndarray, score: np.ndarray, ok: np.ndarray, inc: Candidate,
                   tag: str) -> Iterator[tuple[str, Candidate]]:
    """The row of highest ``score`` among ``ok`` (the lowest index on a tie), with the incumbent's patches, as
    ``tag``, when its score clears the incumbent by the gate; ``ok`` must select at least one row."""
    idx = np.flatnonzero(ok)
    i = idx[np.lexsort((idx, -score[idx]))][0]
    if score[i] >= view.incumbent_y + view.gate:
        yield tag, view.pool.to_candidate(rows[i], inc.patches)


#: p(fit) a stacked move must reach
SAFE_STACK_FIT = 0.8
#: busy trials from which a slot may go to the stacked move
STACK_BUSY = 2
#: busy trials from which a slot may go to a Thompson draw (slots 7 and wider)
THOMPSON_BUSY = 6


def propose(view: SearchView, rng: np.random.Generator, taken: set[Candidate],
            busy: set[Candidate] = frozenset()) -> Iterator[tuple[str, Candidate]]:
    """All proposals in priority order (see module docstring).

    ``busy``: candidates running or already in this batch.  A queued follow-up one move away from a
    busy follow-up waits for that one's outcome (no near-duplicate bundles or backtracks in one
    batch); ranked pool candidates one move from a busy candidate come after all others.
    """
    # the starts; with busy starts, their hedges and the contrarian probe between them
    yield from batch.starts_and_hedges(view, busy, lambda: contrarian(view, busy))
    queue = view.queue
    order = sorted(range(len(queue)), key=lambda i: (PRIORITY.get(queue[i][0], 2), -i))
    busy_followups = [b for b in busy if view.followup_tag(b) is not None]
    for i in order:
        if any(_near(view, queue[i][1], b) for b in busy_followups if b != queue[i][1]):
            continue
        yield queue[i]
    pool = view.pool
    rows = pool.rows(rng)
    inc = view.incumbent
    acq, mu, sd, p = pool.score(rows, inc.patches)
    inc_row = pool.row_of(inc)
    dist = (rows != inc_row).sum(axis=1)
    big = sorted(view.big_knobs()) or [k.name for k in view.space.knobs]
    bigcols = [j for j, k in enumerate(pool.knobs) if k.name in big]
    bdist = (rows[:, bigcols] != inc_row[bigcols]).sum(axis=1)
    ok = p >= float(view.tune["min_p_feasible"])
    if view.tune["spread_wave"] is not None:
        yield from _unshared(view, rows, mu, p, busy, inc)
    upside = float(np.max(np.where(ok & (dist > 0), mu + 2 * sd, -np.inf), initial=-np.inf)) - view.incumbent_y
    yield from contrarian(view, busy)
    yield from _patch_ops(view, upside < view.gate or view.stall >= int(view.tune["stall_trials"]), busy)
    # stalled on an experience start: refine it (controller/search/refine.py) before escaping it
    yield from refine.refine_sweep(view, busy)

    crowded = np.zeros(len(rows), dtype=bool)  # one knob from a busy candidate with the incumbent's patches
    for b in busy:
        if b.patches == inc.patches:
            crowded |= (rows != pool.row_of(b)).sum(axis=1) <= 1

    def ranked(mask: np.ndarray, tag: str, limit: int | None = 200) -> Iterator[tuple[str, Candidate]]:
        idx = np.flatnonzero(mask)
        for i in idx[np.lexsort((idx, -acq[idx], crowded[idx]))][:limit]:
            yield tag, pool.to_candidate(rows[i], inc.patches)

    if len(busy) >= STACK_BUSY:
        yield from _stacked(view, rows, mu, p, dist, crowded, inc)
    if len(busy) >= THOMPSON_BUSY:
        yield from _thompson(view, rows, p, dist, crowded, inc, rng)
    st = int(view.tune["stall_trials"])
    stall = view.escape_stall
    if stall >= st:
        every = int(view.tune["restart_every"])
        if (stall - st) % every == every - 1:
            cls = _class(view, inc, big)
            others = [(o.step_time_s, c.signature, c) for c, o in view.history
                      if o.status == "ok" and _class(view, c, big) != cls]
            if others:
                center = min(others)[2]
                cd = (rows != pool.row_of(center)).sum(axis=1)
                yield from ranked(ok & (cd <= 2), "restart")
        dmin = min(3, 1 + stall - st)
        tabu = view.active_tabu_moves()
        moves_ok = np.ones(len(rows), dtype=bool)
        if tabu:
            for i in np.flatnonzero((bdist >= dmin) & ok):
                moved = {(pool.knobs[j].name, pool.knobs[j].values[rows[i, j]]) for j in bigcols if rows[i, j] != inc_row[j]}
                moves_ok[i] = not moved <= tabu
        yield from ranked(ok & moves_ok & (bdist >= dmin) & (dist <= dmin + 2), "escape")
    yield from ranked(ok & (dist <= int(view.tune["trust_radius"])), "trust")
    yield from ranked(np.ones(len(rows), dtype=bool), "global", None)
