"""The run-stage search controller (paper section 4) over an abstract evaluate callback.

``SearchController`` proposes candidates (``ask``), absorbs outcomes (``tell``),
and decides promotion.  It never touches a database or an executor.

Determinism: ``ask`` is a pure function of the constructor arguments, the
sequence of ``tell`` calls, and the outstanding candidates (asked but not yet
told, plus ``pending``).  All state mutates in ``tell``; randomness is seeded
from ``(seed, number of tells, number busy)``.  A controller rebuilt by
replaying every recorded tell proposes the same next candidates when given the
still-running candidates as ``pending`` and, before the tells, each candidate's
ask point in :attr:`SearchController.asked_at` (how many tells it was asked
after; ``ask`` records it live, the campaign stores it as ``trials.asked_after``):
with ``stall_blind`` a trial asked before the last improvement was told is no
stall of escape mode.

Batches and asynchronous slots: ``ask(q)`` fills slots one at a time and equals
``q`` successive ``ask(1, pending=...)`` calls; busy candidates are fantasized
into the time model at their predicted mean and may stand in as the believed
incumbent (see :meth:`SearchController._fantasized`).

Operators: :mod:`proposals` and :mod:`batch` receive :attr:`SearchController.view`, a read-only
:class:`~infrarsi.controller.search.view.SearchView`, never the controller itself; the follow-up queue
(:class:`~infrarsi.controller.search.view.FollowUps`) is the one thing their ``on_*`` hooks change,
inside :meth:`SearchController.tell`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Any, Iterator, Sequence

import numpy as np

from infrarsi.controller.search import probes, proposals
from infrarsi.controller.search.admission import NearCopies
from infrarsi.controller.search.failures import FailureLedger
from infrarsi.controller.search.features import FeatureMap
from infrarsi.controller.search.models import MemoryModel, TimeModel, log_speedup, memory_rows
from infrarsi.controller.search.promotion import decide_promotion, search_evidence
from infrarsi.controller.search.space import (PATCH, Candidate, KnobSpec, Outcome, Promotion, SearchSpace, Setting,
                                     settings_key)
from infrarsi.controller.search.view import FollowUps, SearchView
from infrarsi.surrogate.amdahl import amdahl_ceiling

DEFAULT_TUNING: dict[str, Any] = {
    "default_prior_sd": 0.10,    # prior SD of a knob setting with no stated prior
    "sigma_min": 0.02,           # floor of every prior SD
    "patch_prior_sd": 0.02,      # prior SD of a patch's log-gain
    "patch_kappa": 0.5,          # shrinkage of stated patch priors
    "pair_prior_sd": 0.15,       # prior SD of an enabling-pair coefficient
    "model_noise_floor": 0.01,   # floor on the per-trial log noise SD used by the time model
    "beta": 1.0,                 # UCB exploration weight
    "fail_penalty": 0.05,        # acquisition value of a predicted failure (log units below no gain)
    "min_p_feasible": 0.35,      # skip candidates less likely than this to fit in memory
    "stall_trials": 2,           # non-improving trials before escape mode
    "restart_every": 3,          # in escape mode, warm-restart every this many stalls
    "tabu_tenure": 4,            # tells for which a failed big-knob move stays tabu
    "trust_radius": 2,           # knobs that may change in normal mode
    "pool_limit": 20000,         # enumerate the whole space up to this many configurations
    "pool_sample": 4000,         # otherwise sample this many per ask
    "exclude_after": 3,          # distinct saver sets an OOM spender may fail with
    "reference_peak_mem_gib": None,
    "memory_forms": "additive",  # "additive", or "mixture": also a multiplicative form, weighted by evidence
    "memory_pairs": False,       # admit memory interaction features when a told peak misses the prediction
    "memory_activation_pairs": True,  # memory interactions among activation mechanisms from the start
    "known_conflicts": (),       # tuples of (knob, value) settings known to conflict
    "patch_priors": None,        # {patch: predicted log-gain} (shrunk by patch_kappa)
    "patch_replaces": None,      # {patch: [patches]}: a completion of those patches, tried in their place
    "prior_revision": True,      # empirical prior revision after repeated failures / a confident failure
    "believe_followers": 3,      # busy neighbours after which a pending candidate stops standing in as incumbent
    "suspect_share": 0.5,        # one busy candidate at a time may hold more than this share of a crash's open suspects
    "common_factor": True,       # a setting in two failures and no passing run makes its holders near copies
    "extrapolate_starts": False,  # True: a start that improves on a non-start queues extrapolations (session 26)
    "split_doubtful": False,     # an improving move of 2+ settings queues it without each untried unsigned one
    "stall_blind": True,         # escape mode counts no stall of a trial asked before the last improvement was told
    "failure_signatures": True,  # a crash's ban is chosen on the evidence of crashes with the same error only
    "error_names": True,         # among tied conflict tuples, ban the one the crash's message names (naming.py)
    "spread_wave": 0.5,          # 4+ busy, this share holding untested settings: a slot without them (None: off)
    "ordered_chain": None,       # rho: an ordered knob's settings are chained increments (TimeModel; None: off)
    "ordered_chain_when": "always",  # or "loss": chain a level to the previous one only while that one hurts
}


class SearchController:
    """Budgeted compositional search over knob bundles and patches (see module docstring).

    Args:
        space: knobs (with optional priors) and patches.
        noise: a calibrated ``infrarsi.surrogate.noise.NoiseModel`` (``sigma_pair``, ``big_knob_gate``,
            ``promotion_margin``).
        reference_step_time_s: the reference's steady-state step time; ``y = ln(T0 / T)``.
        capacity_gib: per-GPU memory capacity.
        seed: seeds every random choice (with the tell/outstanding counts).
        experience: records from the experience bank: ``{"config": {...}, "speedup": x}`` (drives the
            first start; with ``"mem_delta_gib"``/``"mem_dropped"`` the memory that start's bundle was measured
            to take elsewhere, see :mod:`infrarsi.controller.experience.start`), ``{"knob", "value",
            "log_speedup"}`` (sets that setting's prior mean; with ``"prior_sd"`` it is a retrieved prior, mean
            and SD as given, see :mod:`infrarsi.controller.experience.retrieval`; with ``"mem_gib"``/``"mem_sd"``
            it also sets the memory model's prior delta of that setting), ``{"conflict": [[knob, value], ...]}``
            (a known conflict) or ``{"suspect": [[knob, value], ...]}`` (a tuple another campaign blamed without pinning
            it down: avoided until this campaign's ledger explains a crash of one of its settings otherwise, and
            the ledger's first guess among equally implicated tuples; never a ban) or ``{"requires": [[knob,
            value], [partner knob, partner value]]}`` (a requirement another campaign pinned down: the setting
            runs only beside its partner, and a probe of it brings the partner).  Priors only: observations
            of this campaign govern the posterior.
        phase_shares: profiled time per phase; a knob whose ``mechanism`` names phases
            (``"optimizer"`` or ``"forward+backward"``) gets its prior capped by the Amdahl ceiling.
        tuning: overrides of :data:`DEFAULT_TUNING`; unknown keys raise ValueError.
    """

    def __init__(self, space: SearchSpace, noise: Any, reference_step_time_s: float, capacity_gib: float,
                 seed: int = 0, experience: list[dict] | None = None, phase_shares: dict | None = None,
                 **tuning: Any):
        unknown = set(tuning) - set(DEFAULT_TUNING)
        if unknown:
            raise ValueError(f"unknown tuning keys: {sorted(unknown)}")
        if not reference_step_time_s > 0:
            raise ValueError("reference_step_time_s must be > 0")
        self.space = space
        self.noise = noise
        self.t0 = float(reference_step_time_s)
        self.capacity = float(capacity_gib)
        self.seed = int(seed)
        self.experience = list(experience or [])
        self.phase_shares = dict(phase_shares or {})
        self.tune = {**DEFAULT_TUNING, **tuning}
        self.gate = float(noise.big_knob_gate)
        self.sigma = float(noise.sigma_pair)
        self.reference = space.reference()
        self.fmap = FeatureMap(space)
        known = [tuple(tuple(s) for s in t) for t in self.tune["known_conflicts"]]
        known += [tuple(tuple(s) for s in r["conflict"]) for r in self.experience if "conflict" in r]
        hints = [tuple(tuple(s) for s in r["suspect"]) for r in self.experience if "suspect" in r]
        needs = [(tuple(r["requires"][0]), tuple(r["requires"][1])) for r in self.experience if "requires" in r]
        self.ledger = FailureLedger(exclude_after=int(self.tune["exclude_after"]), known_conflicts=known,
                                    suspected=hints, known_requirements=needs,
                                    signatures=bool(self.tune["failure_signatures"]),
                                    names=bool(self.tune["error_names"]))
        #: refuses a second busy near copy of an unresolved crash (admission.NearCopies)
        self.near_copies = NearCopies(self.ledger, self.space, self.tune, self.gate)
        self.prior_mu, self.prior_sd = self._knob_priors()
        #: settings whose prior came from experience measured elsewhere (retrieved at distance > 0): prior mean
        self.transferred: dict[Setting, float] = {
            (r["knob"], r["value"]): float(r["log_speedup"]) for r in self.experience
            if "knob" in r and "prior_sd" in r and float(r.get("distance") or 0.0) > 0}
        #: settings whose records elsewhere carry no sign here (balance or FP8 effects from another SKU): the
        #: largest |log-speedup| they were measured at
        self.sign_unknown: dict[Setting, float] = {
            (r["knob"], r["value"]): float(r["unsigned_gain"]) for r in self.experience
            if "knob" in r and "prior_sd" not in r and r.get("unsigned_gain") is not None}
        self.ledger.risk = lambda st: float(self.prior_mu[self.fmap.index[st]]) if st in self.fmap.index else 0.0
        nv = max(self.sigma, float(self.tune["model_noise_floor"])) ** 2
        self.time = TimeModel(self.fmap, self.prior_mu, self.prior_sd, nv, float(self.tune["pair_prior_sd"]),
                              float(self.tune["sigma_min"]),
                              unsigned={self.fmap.index[s]: g for s, g in self.sign_unknown.items()
                                        if s in self.fmap.index},
                              chains=self._ordered_chains() if self.tune["ordered_chain"] is not None else (),
                              chain_rho=float(self.tune["ordered_chain"] or 0.0),
                              chain_when=str(self.tune["ordered_chain_when"]))
        mem_priors = {(r["knob"], r["value"]): (float(r["mem_gib"]), float(r.get("mem_sd") or 0.0))
                      for r in self.experience if "knob" in r and r.get("mem_gib") is not None}
        self.mem = MemoryModel(space, self.fmap, self.capacity, self.tune["reference_peak_mem_gib"], mem_priors,
                               forms=str(self.tune["memory_forms"]),
                               activation_pairs=bool(self.tune["memory_activation_pairs"]))
        self.history: list[tuple[Candidate, Outcome]] = []
        self.told: set[Candidate] = set()
        self.outstanding: dict[Candidate, None] = {}
        self.tabu: set[Candidate] = set()
        self.tabu_moves: dict[Setting, int] = {}
        self.followups = FollowUps()  # changed only by the proposals' on_* hooks, inside tell
        self.incumbent: Candidate = self.reference
        self.incumbent_y = 0.0
        self.stall = 0
        #: ``stall`` without the trials asked before the last improvement was told (``stall_blind``)
        self.seen_stall = 0
        self.escapes = 0
        #: per candidate, how many tells it was asked after (set by ``ask``; a replay sets it before the tells)
        self.asked_at: dict[Candidate, int] = {}
        #: how many tells there were once the last improvement was told
        self.incumbent_at = 0
        self.blame_log: list[str] = []
        self.pre_execution_rejections = 0
        #: (tells, values derived from the told history alone): see SearchView.per_tell
        self._tell_memo: tuple[int, dict[str, Any]] = (-1, {})
        self.proposed_by: dict[Candidate, str] = {}  # operator that proposed each asked candidate (reports only)
        #: the read-only interface every proposal operator receives (controller/search/view.py)
        self.view = SearchView(self)
        self.pool = proposals.Pool(self.view)
        self.starts = proposals.initial_starts(self.view)

    @property
    def queue(self) -> list[tuple[str, Candidate]]:
        """Queued follow-ups ``(tag, candidate)`` (the :class:`FollowUps` list; read it, do not change it)."""
        return self.followups.items

    @property
    def queue_tags(self) -> dict[Candidate, str]:
        """The tag every candidate ever queued got (read it, do not change it)."""
        return self.followups.tags

    # ------------------------------------------------------------------ priors
    def _knob_priors(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.tune
        effects: dict[Setting, list[float]] = {}
        retrieved: dict[Setting, tuple[float, float]] = {}
        for rec in self.experience:
            if "knob" in rec and "log_speedup" in rec and "prior_sd" in rec:
                retrieved[(rec["knob"], rec["value"])] = (float(rec["log_speedup"]), float(rec["prior_sd"]))
            elif "knob" in rec and "log_speedup" in rec:
                effects.setdefault((rec["knob"], rec["value"]), []).append(float(rec["log_speedup"]))
        patch_priors = t["patch_priors"] or {}
        mu, sd = [], []
        for name, value in self.fmap.singles:
            if name == PATCH:
                mu.append(float(t["patch_kappa"]) * float(patch_priors.get(value, 0.0)))
                sd.append(float(t["patch_prior_sd"]))
                continue
            k = self.space.knob(name)
            m = k.prior_of(value)
            s = k.prior_sd if k.prior_sd is not None else float(t["default_prior_sd"])
            if (name, value) in retrieved:
                m, s = retrieved[(name, value)]
            elif (name, value) in effects:
                m = float(np.mean(effects[(name, value)]))
                s = min(s, max(float(t["sigma_min"]), 0.5 * abs(m)))
            targets = (k.mechanism or "").split("+")
            if self.phase_shares and k.mechanism and all(t in self.phase_shares for t in targets):
                m = min(m, amdahl_ceiling(self.phase_shares, targets))  # phase-headroom ceiling
            mu.append(m)
            sd.append(max(float(t["sigma_min"]), s, 0.5 * abs(m)))
        return np.asarray(mu), np.asarray(sd)

    def _ordered_chains(self) -> list[list[int]]:
        """Per side of each ordered knob's reference, its settings' feature indices, outward (TimeModel)."""
        out = []
        for k in self.space.knobs:
            if not k.ordered or k.reference not in k.values:
                continue
            r = k.values.index(k.reference)
            for side in (k.values[r + 1:], k.values[:r][::-1]):
                chain = [self.fmap.index[(k.name, v)] for v in side if (k.name, v) in self.fmap.index]
                if len(chain) > 1:
                    out.append(chain)
        return out

    # ------------------------------------------------------------- predictions
    def predict(self, cands: Sequence[Candidate]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean log-speedup, sd, p_feasible) for each candidate."""
        X = self.fmap.encode(cands)
        mu, sd = self.time.predict(X)
        return mu, sd, self.mem.p_feasible(X)

    def mem_delta(self, s: Setting) -> float:
        """Estimated peak-memory delta (GiB) of one setting vs the reference."""
        X = self.fmap.encode_settings(frozenset([s]))[None, :]
        Z = np.zeros_like(X)
        return float(self.mem.predict(X)[0][0] - self.mem.predict(Z)[0][0])

    def single_effects(self) -> dict[Setting, tuple[float, float, float]]:
        """Per knob setting: (prior mean, posterior mean, posterior sd) of its single-knob log-speedup."""
        coef, csd = self.time.coef()
        return {s: (float(self.prior_mu[i]), float(coef[i]), float(csd[i])) for i, s in enumerate(self.fmap.singles)}

    def big_knobs(self) -> set[str]:
        """Knobs whose prior, posterior or measured single-knob log-speedup clears the gate on some setting."""
        big: set[str] = set()
        for (name, _), (prior, post, _) in self.single_effects().items():
            if name != PATCH and (abs(prior) >= self.gate or abs(post) >= self.gate):
                big.add(name)
        for c, o in self.history:
            sets = c.settings(self.space)
            if o.status == "ok" and len(sets) == 1:
                (name, _), = sets
                if name != PATCH and abs(log_speedup(self.t0, o.step_time_s)) >= self.gate:
                    big.add(name)
        return big

    # -------------------------------------------------------------- admission
    def admissible(self, cand: Candidate, taken: set[Candidate], op: str | None = None) -> str | None:
        """Why ``cand`` may not be proposed now (None if it may); ``op``, the proposing operator: a
        ``suspect-test`` (``probes.contrarian``) is built to hold one suspected conflict, so suspects do not
        refuse it (everything else does)."""
        if cand in self.told or cand in taken or cand in self.outstanding:
            return "visited"
        if cand in self.tabu:
            return "tabu"
        if cand.is_reference(self.space):
            return "reference"
        if not self.space.legal(cand.as_dict()):
            return "illegal"
        sets = cand.settings(self.space)
        why = self.ledger.blocked(sets)
        if why:
            return why
        why = self.near_copies.refusal(cand, set(self.outstanding) | taken, len(self.history))
        if why:
            return why
        why = self._suspected(sets) if op != probes.SUSPECT_TEST else None
        if why:
            return why
        for s, need in self.ledger.needs_saver.items():
            if s in sets and not any(self.mem_delta(x) < 0 for x in sets if x != s):
                return f"{settings_key(s)} needs a memory saver"
        return None

    def _suspected(self, sets: frozenset[Setting]) -> str | None:
        """Why ``sets`` holds a conflict another campaign suspected (``{"suspect": ...}`` experience), else None.

        A suspect is avoided until this campaign's own ledger bans another tuple sharing one of its settings: then
        the crash the suspect stood for has an explanation here (the source's blame was one guess among several,
        and a wrong guess must not keep its settings apart for good), or until a run holding the whole tuple
        passes here (a suspect test, ``probes.contrarian``: the guess was wrong).  A suspect this campaign
        bans itself is refused by the ledger as any ban."""
        for t in self.active_suspects():
            if set(t) <= sets:
                return "suspected conflict " + " & ".join(settings_key(s) for s in t) + " (experience)"
        return None

    def active_suspects(self) -> list[tuple[Setting, ...]]:
        """The suspected conflicts (``{"suspect": ...}`` experience) admission still avoids (see :meth:`_suspected`).

        Cached until the next tell (``SearchView.per_tell``): the ledger changes only there, and admission asks
        for every proposed candidate."""
        return self.view.per_tell("active_suspects", lambda: [
            t for t in self.ledger.suspected
            if not any(set(b) & set(t) and set(b) != set(t) for b in self.ledger.banned)
            and not any(set(t) <= p for p in self.ledger.passing)])

    # --------------------------------------------------------------------- ask
    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]:
        """Up to ``q`` new candidates, never visited, tabu, outstanding or in ``pending``.

        Slots are filled one at a time: each slot sees every busy candidate (outstanding, ``pending`` and
        the slots already filled) fantasized into the time model at its predicted log-speedup (kriging
        believer), and the ranked operators put candidates next to a busy one last (local penalization).
        So ``ask(q)`` equals ``q`` successive ``ask(1, pending=...)`` calls, and with nothing busy the
        answer is exactly the one-at-a-time proposal.  Pure in the history plus the busy set.
        """
        if q < 1:
            return []
        taken: set[Candidate] = set(pending)
        out: list[Candidate] = []
        for _ in range(q):
            busy = set(self.outstanding) | taken
            rng = np.random.default_rng([self.seed, len(self.history), len(busy)])
            got: tuple[str, Candidate] | None = None
            with self._fantasized(busy):
                for op, cand in proposals.propose(self.view, rng, taken, busy):
                    why = self.admissible(cand, taken, op)
                    if why is not None:
                        self.pre_execution_rejections += 1
                        continue
                    got = (op, cand)
                    break
            if got is None:
                break
            taken.add(got[1])
            out.append(got[1])
            self.proposed_by[got[1]] = got[0]
        for c in out:
            self.outstanding[c] = None  # registered as visited before execution
            self.asked_at.setdefault(c, len(self.history))
        return out

    @contextlib.contextmanager
    def _fantasized(self, busy: set[Candidate]) -> Iterator[None]:
        """Within the block the time model also holds every busy candidate at its predicted mean.

        The incumbent may be replaced by the believed one (see below).  The real model and incumbent
        are restored on exit (also on error); memory and failure state are untouched.
        """
        if not busy:
            yield
            return
        fc = sorted(busy, key=lambda c: c.signature)
        fmu, _, fp = self.predict(fc)
        saved = (self.time.model, self.time.revision, self.time.links, self.incumbent, self.incumbent_y)
        cands, y = self._ok_rows()
        # the believed incumbent: a busy candidate with the incumbent's patches, likely to fit, whose
        # predicted log-speedup clears the measured incumbent by the gate (what a tell would most
        # likely make the incumbent); trust regions and extrapolations centre on it meanwhile
        # (hedged: not once ``believe_followers`` busy candidates already sit within the trust radius
        # of it, so one unverified centre never takes over a whole batch)
        rows = {c: self.pool.row_of(c) for c in fc}
        radius = int(self.tune["trust_radius"])
        followers = int(self.tune["believe_followers"])

        def crowded(c: Candidate) -> bool:
            # one-knob variants of a start are its hedges (controller/search/batch.py), not followers
            near = 2 if c in self.starts else 1
            return sum(1 for o in fc if o != c and near <= int((rows[o] != rows[c]).sum()) <= radius) >= followers

        believed = [(float(m), c.signature, c) for m, p, c in zip(fmu, fp, fc)
                    if c.patches == self.incumbent.patches and p >= 0.5 and m >= self.incumbent_y + self.gate
                    and not crowded(c)]
        try:
            self.time.refit(self.fmap.encode(cands + fc), np.concatenate([y, fmu]))
            if believed:
                best = max(believed)
                self.incumbent, self.incumbent_y = best[2], best[0]
            yield
        finally:
            self.time.model, self.time.revision, self.time.links, self.incumbent, self.incumbent_y = saved

    # -------------------------------------------------------------------- tell
    def tell(self, cand: Candidate, outcome: Outcome) -> None:
        """Record one outcome: refit models, attribute failures, update incumbent and operator queues.

        Raises ValueError if ``cand`` does not belong to the space (unknown knob, value or patch).
        """
        self.space.check(cand)
        blind = bool(self.tune["stall_blind"]) and self.asked_at.get(cand, len(self.history)) < self.incumbent_at
        prev_pred = float(self.predict([cand])[0][0])
        prev_mem = self.mem.predict(self.fmap.encode([cand])) if self.tune["memory_pairs"] else None
        self.outstanding.pop(cand, None)
        self.history.append((cand, outcome))
        self.told.add(cand)
        sets = cand.settings(self.space)
        if outcome.status != "ok":
            self.tabu.add(cand)
        blame = self.ledger.record(sets, outcome, self.mem_delta)
        if blame:
            self.blame_log.append(f"{cand.signature[:10]} {blame}")
        if outcome.status != "ok" and not blame.startswith("patch") and self.tune["prior_revision"]:
            self._maybe_trigger_revision(sets)
        self._refit()
        if prev_mem is not None:
            self._maybe_add_memory_pairs(cand, outcome, float(prev_mem[0][0]), float(prev_mem[1][0]))
        if outcome.status == "ok":
            self._maybe_add_pairs(cand, outcome)
        improved = False
        tag = self.followups.tags.get(cand, "")
        old_incumbent = self.incumbent
        if outcome.status == "ok":
            y = log_speedup(self.t0, outcome.step_time_s)
            improved = y > self.incumbent_y + self.gate
            if y > self.incumbent_y:
                old = self.incumbent
                self.incumbent, self.incumbent_y = cand, y
                if self.tune["split_doubtful"] and cand not in self.starts:
                    proposals.on_joint_improvement(self.view, self.followups, old, cand)
                if improved:
                    # two starts differ on axes no move chose: extrapolating between them is a guess (and, with
                    # extrapolate_starts off, so is extrapolating from any incumbent to a start: its values came from
                    # priors or experience, not from a measured step)
                    proposals.on_improvement(self.view, self.followups, old, cand,
                                             extrapolate=not (cand in self.starts and (
                                                 old in self.starts or not self.tune["extrapolate_starts"])))
            if tag.startswith("backtrack"):
                proposals.on_backtrack_ok(self.view, self.followups, cand, old_incumbent)
        else:
            self._tabu_move(cand)
            if outcome.status == "oom" and not self._hedges_an_untold_start(cand):
                proposals.on_oom(self.view, self.followups, cand, outcome, prev_pred)
            elif outcome.status in ("crash", "rejected") and not cand.patches:
                proposals.on_crash(self.view, self.followups, cand)
        if outcome.status == "ok" and not improved:
            self._tabu_move(cand)
        if cand not in self.starts:
            self.stall = 0 if improved else self.stall + 1
            self.seen_stall = 0 if improved else self.seen_stall + (0 if blind else 1)
        if improved:
            self.incumbent_at = len(self.history)
        if self.stall >= int(self.tune["stall_trials"]):
            self.escapes += 1

    def _hedges_an_untold_start(self, cand: Candidate) -> bool:
        """True if ``cand`` differs in at most four settings from a start not yet told (a hedge of a busy start,
        double hedges included; a near copy that moves up to four knobs to or from the reference counts too): its
        OOM needs no saver while the start itself may still run.  A function of the tells so far, so a
        controller rebuilt by replaying them decides alike.  With one slot every start that runs is told first;
        a start never run (refused by admission) stays untold, so a near copy of it gets no saver either."""
        rc = cand.settings(self.space)
        return any(s not in self.told and s != cand and len(rc ^ s.settings(self.space)) <= 4
                   for s in self.starts)

    def _maybe_trigger_revision(self, sets: frozenset[Setting]) -> None:
        """Turn on empirical prior revision after two configuration failures or a confident setting's failure."""
        failures = sum(1 for c, o in self.history if o.status != "ok" and not c.patches)
        confident = any(s in self.fmap.index and self.prior_mu[self.fmap.index[s]] > 0
                        and self.prior_mu[self.fmap.index[s]] >= 2 * self.prior_sd[self.fmap.index[s]] for s in sets)
        if failures >= 2 or confident:
            self.time.revise = True

    def _tabu_move(self, cand: Candidate) -> None:
        big = self.big_knobs()
        diff = cand.settings(self.space) - self.incumbent.settings(self.space)
        moves = [s for s in diff if s[0] in big]
        if len(moves) == 1:
            self.tabu_moves[moves[0]] = len(self.history) + int(self.tune["tabu_tenure"])

    def active_tabu_moves(self) -> set[Setting]:
        n = len(self.history)
        return {s for s, until in self.tabu_moves.items() if until > n}

    def measured_features(self) -> np.ndarray:
        """Boolean mask over the time model's features: on in at least one told trial that ran (status ok)."""
        return (self.fmap.encode(self._ok_rows()[0]) != 0).any(axis=0)

    def _ok_rows(self) -> tuple[list[Candidate], np.ndarray]:
        cands = [c for c, o in self.history if o.status == "ok"]
        y = np.array([log_speedup(self.t0, o.step_time_s) for _, o in self.history if o.status == "ok"])
        return cands, y

    def _refit(self) -> None:
        cands, y = self._ok_rows()
        self.time.refit(self.fmap.encode(cands), y)
        self._refit_memory()

    def _refit_memory(self) -> None:
        idx, my, kind = memory_rows(self.history, self.capacity)
        self.mem.refit(self.fmap.encode([self.history[i][0] for i in idx]), np.array(my), kind)

    def _maybe_add_memory_pairs(self, cand: Candidate, outcome: Outcome, prev_mean: float, prev_sd: float) -> None:
        """Admit memory interactions when the told peak (or OOM bound) is far from the prediction made before it
        (:meth:`MemoryModel.maybe_add_pair`); refits the memory model if one was added."""
        idx, y, kind = memory_rows([(cand, outcome)], self.capacity)
        if not idx:
            return
        singles = [self.fmap.index[s] for s in cand.settings(self.space) if s in self.fmap.index]
        if self.mem.maybe_add_pair(singles, y[0], kind[0], prev_mean, prev_sd):
            self._refit_memory()

    def _maybe_add_pairs(self, cand: Candidate, outcome: Outcome) -> None:
        """Admit enabling pairs when an ok trial's joint effect is far from the additive prediction."""
        knob_sets = sorted((s for s in cand.settings(self.space) if s[0] != PATCH), key=settings_key)
        if len(knob_sets) < 2:
            return
        y = log_speedup(self.t0, outcome.step_time_s)
        mu, sd = self.time.predict(self.fmap.encode([cand]))
        tol = max(self.gate, 2.5 * math.sqrt(sd[0] ** 2 + self.time.noise_var))
        if abs(y - mu[0]) <= tol:
            return
        coef, _ = self.time.coef()
        ranked = sorted(knob_sets, key=lambda s: (-abs(coef[self.fmap.index[s]]), settings_key(s)))[:4]
        added = False
        for a, b in itertools.combinations(ranked, 2):
            added |= self.fmap.add_pair(a, b)
        if added:
            self._refit()

    # ---------------------------------------------------------------- results
    def best(self) -> Candidate | None:
        """The best verified (status ok) candidate by measured step time."""
        ok = [(o.step_time_s, c.signature, c) for c, o in self.history if o.status == "ok"]
        return min(ok, key=lambda t: (t[0], t[1]))[2] if ok else None

    def promotion_candidates(self, k: int = 2) -> list[Candidate]:
        """Up to ``k`` distinct ok candidates ranked by posterior mean blended with their measurements."""
        ok: dict[Candidate, list[float]] = {}
        for c, o in self.history:
            if o.status == "ok" and not c.is_reference(self.space):
                ok.setdefault(c, []).append(log_speedup(self.t0, o.step_time_s))
        if not ok:
            return []
        cands = sorted(ok, key=lambda c: c.signature)
        mu, _, _ = self.predict(cands)
        score = [0.5 * m + 0.5 * float(np.mean(ok[c])) for m, c in zip(mu, cands)]
        order = sorted(range(len(cands)), key=lambda i: (-score[i], cands[i].signature))
        return [cands[i] for i in order[:k] if score[i] > 0]

    def promote(self, reruns: dict[Candidate, list[tuple[float, float]]]) -> Promotion:
        """Promote the fastest re-run candidate whose paired speedup clears the noise margin, else 1.00x."""
        return decide_promotion(reruns, self.noise, search_evidence(self.history))

    def patch_request(self, busy: Sequence[Candidate] = ()) -> str | None:
        """Why proposers should be asked for new source patches now, or None (paper 4.3).

        ``"upside"``: the configuration proposals' two-sigma upside is below the gate max(0.02, 2 sigma_pair) and
        every patch of the space has been tried (the search has nothing left that could still clear the noise).
        ``"stack"``: two or more individually verified patches failed to apply together (a patch conflict), so a
        proposer may complete them into one stack.  Pure in the history and ``busy``; never mutates.
        """
        if self.conflicting_stacks():
            return "stack"
        if proposals.untested_patches(self.view, set(busy)):
            return None
        return "upside" if proposals.config_upside(self.view) < self.gate else None

    def conflicting_stacks(self) -> list[frozenset[str]]:
        """Sets of individually verified patches whose stack failed to apply (oldest first, no repeats)."""
        out: list[frozenset[str]] = []
        for c, o in self.history:
            if o.status == "crash" and "patch conflict" in (o.reason or "") and len(c.patches) >= 2 \
                    and c.patches <= self.ledger.verified_patches and c.patches not in out:
                out.append(c.patches)
        return out

    def state_summary(self) -> dict:
        coef, csd = self.time.coef()
        return {
            "trials": len(self.history),
            "incumbent": self.incumbent.as_dict() | {"@patches": sorted(self.incumbent.patches)},
            "incumbent_log_speedup": self.incumbent_y,
            "big_knobs": sorted(self.big_knobs()),
            "gate": self.gate,
            "stall": self.stall,
            "escapes": self.escapes,
            "tabu": sorted(c.signature for c in self.tabu),
            "tabu_moves": sorted(settings_key(s) for s in self.active_tabu_moves()),
            "pre_execution_rejections": self.pre_execution_rejections,
            "blame": list(self.blame_log),
            **self.ledger.summary(),
            "prior_revised": bool(self.time.revision is not None and self.time.revision.revised),
            "coefficients": {self.fmap.label(i): [float(coef[i]), float(csd[i])] for i in range(self.fmap.dim)},
        }

    def memory_table(self) -> list[dict]:
        rows = []
        for s in self.fmap.singles:
            X = self.fmap.encode_settings(frozenset([s]))[None, :]
            m, sd = self.mem.predict(X)
            m0, _ = self.mem.predict(np.zeros_like(X))
            gib = float(m[0] - m0[0])
            rows.append({"name": s[0] if s[0] != PATCH else f"patch:{s[1]}", "value": s[1], "gib": gib,
                         "sd": float(sd[0]), "class": "spender" if gib > 0 else "saver" if gib < 0 else "neutral"})
        return rows


def knob_specs(dicts: Sequence[dict]) -> tuple[KnobSpec, ...]:
    """Build knob specs from landscape/contract dicts."""
    return tuple(KnobSpec.from_dict(d) for d in dicts)
