"""Failure attribution (paper section 4.2): memory, conflicts, and patches.

* OOM: the largest memory spender among the failed candidate's settings is
  tagged as needing a memory saver that covers the measured shortfall; it is
  excluded only after it has failed with ``exclude_after`` distinct saver sets.
* Non-memory crash (or a numerical rejection of a patch-free candidate): ban
  only the minimal conflict tuple - the smallest co-occurring pair (else
  triple) of its settings absent from every passing run.  A setting that
  crashed alone is banned outright, unless it also crashed beside partners:
  then it may need one of them (unpadding needs flash attention) and stays
  open (:meth:`FailureLedger._needs_partner`).  A crash also opens "needs a
  partner" hypotheses ``(s, r)``: ``s`` passed, every passing run with ``s``
  held ``r`` (or ``s`` never passed and every passing run held ``r``),
  and this record has ``s`` without ``r``
  (:meth:`FailureLedger.requirements_of`); one that explains more crash
  records than the record's best tuple is kept instead of that tuple, and
  blocks ``s`` without ``r`` (no tuple of present settings can say that, so
  such crashes used to stay unexplained or be pinned on an innocent pair
  that then blocked the peak).  With ``names``, ties are broken by what the
  crash's message names (:mod:`~infrarsi.controller.search.naming`): among
  tuples, the one with the most named settings; and a requirement whose
  setting and partner are both named explains a record it ties with a tuple.  Bans are re-derived
  from all records after each observation, so a tuple later seen passing is
  exonerated, and a tuple implicated by several crashes of the same kind
  wins ties.  A record's kind is its failure signature
  (:func:`failure_signature`: the status and the error message with its
  numbers, addresses and paths masked): two crashes that fail with different
  errors have different causes, so one never counts as evidence for the
  other's explanation (a recompile-limit crash and an unpadded batch without
  the varlen kernel each pointed at the pair all the first starts held).  The ban is one
  guess among the record's open tuples (:meth:`FailureLedger.suspects`); how much of
  that open set a new candidate holds (:meth:`FailureLedger.shares`) tells how likely
  it is to repeat the crash whatever the true cause, which the controller uses to keep
  several such near copies from running at once.
* A failure of a candidate carrying unverified patches is blamed on those
  patches, never on the launch configuration, unless that configuration
  already failed the same way without them (a patch probed beside its busy,
  not yet told base, which then fails on its own): then it is the
  configuration's failure, and a patch banned before its base's own failure
  was told is cleared when it is.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable

from infrarsi.controller.search.naming import named_settings
from infrarsi.controller.search.space import PATCH, Outcome, Setting, settings_key

Tuple_ = tuple[Setting, ...]


#: what :func:`failure_signature` masks: hex addresses, paths, then numbers (with decimals and exponents)
_MASKS = (re.compile(r"0x[0-9a-fA-F]+"), re.compile(r"(?:[\w.-]*/)+[\w.-]+"),
          re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"))
SIGNATURE_CHARS = 160


def failure_signature(status: str, reason: str) -> str:
    """The kind of a failure: its status and its one-line reason, lower-cased, with hex addresses, paths and
    numbers masked and whitespace collapsed (the first :data:`SIGNATURE_CHARS` characters).  Two failures of
    one cause give one signature (a loss drift of 3.1% and one of 4.7%; the same exception on another rank
    or address); failures whose messages differ get different ones.  An empty reason says nothing about the
    cause: every such failure of one status shares the signature."""
    text = " ".join((reason or "").split()).lower()
    for mask in _MASKS:
        text = mask.sub("#", text)
    return f"{status}: {text[:SIGNATURE_CHARS]}"


def told_failure(outcome: str, reason: str | None) -> tuple[str, str]:
    """The ``(status, reason)`` the search is told for a trial whose recorded outcome is ``outcome``, neither ok
    nor an OOM: a numerics rejection stays ``rejected``; every other failure (crash, timeout, refused evidence,
    ...) is a ``crash`` whose reason falls back to the outcome.  The campaign (``searchglue.outcome_of``) and
    REPORT.md's failure kinds both map trials through it, so the report's kinds are the ledger's."""
    if outcome == "rejected":
        return "rejected", reason or ""
    return "crash", reason or outcome


def _tkey(t: Tuple_) -> tuple[str, ...]:
    return tuple(sorted(settings_key(s) for s in t))


def _canon_tuple(t: Tuple_) -> Tuple_:
    return tuple(sorted(t, key=settings_key))


@dataclass
class FailureLedger:
    """Accumulates failures; answers ``blocked(settings)`` before execution."""

    exclude_after: int = 3
    known_conflicts: list[Tuple_] = field(default_factory=list)
    #: tuples another campaign blamed for a crash without pinning them down: never a ban here; a tie-breaker in
    #: :meth:`_pick` (the controller's admission also avoids them, ``SearchController._suspected``)
    suspected: list[Tuple_] = field(default_factory=list)
    passing: list[frozenset[Setting]] = field(default_factory=list)
    crash_records: list[frozenset[Setting]] = field(default_factory=list)
    #: per crash record, its kind (:func:`failure_signature`; all one kind when ``signatures`` is off)
    crash_kinds: list[str] = field(default_factory=list)
    #: per crash record, its one-line reason as told (empty when none was given)
    crash_reasons: list[str] = field(default_factory=list)
    #: count a tuple's or requirement's evidence only among records of the explained record's kind
    signatures: bool = True
    #: among tuples tied on evidence, prefer the one whose settings the record's error message names
    #: (:func:`~infrarsi.controller.search.naming.named_settings`)
    names: bool = False
    needs_saver: dict[Setting, float] = field(default_factory=dict)
    saver_sets_failed: dict[Setting, set[frozenset[Setting]]] = field(default_factory=dict)
    excluded: set[Setting] = field(default_factory=set)
    banned_patches: dict[str, str] = field(default_factory=dict)
    verified_patches: set[str] = field(default_factory=set)
    banned: list[Tuple_] = field(default_factory=list)
    #: per banned patch, the (knob settings, status) failures it was blamed for
    patch_blame: dict[str, list[tuple[frozenset[Setting], str]]] = field(default_factory=dict)
    #: (knob settings, status) of every configuration failure without unverified patches
    config_failures: set[tuple[frozenset[Setting], str]] = field(default_factory=set)
    unexplained: int = 0
    risk: Callable[[Setting], float] = field(default=lambda s: 0.0)
    #: per crash record, its open hypotheses (:meth:`suspects`), re-derived with the bans
    _suspects: list[list[Tuple_]] = field(default_factory=list, repr=False)
    #: inferred requirements ``(s, r)``: ``s`` crashes without ``r`` (:meth:`requirements_of`), re-derived with
    #: the bans; a candidate holding ``s`` but not ``r`` is blocked
    requirements: list[tuple[Setting, Setting]] = field(default_factory=list)
    #: requirements ``(s, r)`` another campaign pinned down (``{"requires": ...}`` experience): blocked like the
    #: ledger's own, never re-derived
    known_requirements: list[tuple[Setting, Setting]] = field(default_factory=list)

    def record(self, settings: frozenset[Setting], outcome: Outcome,
               mem_delta: Callable[[Setting], float]) -> str:
        """Attribute one outcome; returns a one-line description of the blame (empty for ok)."""
        patches = {v for k, v in settings if k == PATCH}
        if outcome.status == "ok":
            self.passing.append(settings)
            self.verified_patches |= patches
            self._rederive()
            return ""
        unverified = sorted(patches - self.verified_patches)
        knob_settings = frozenset(s for s in settings if s[0] != PATCH)
        if unverified and (knob_settings, outcome.status) in self.config_failures:
            return f"configuration failed without {', '.join(unverified)} too ({outcome.status}): patches not blamed"
        if unverified:
            for p in unverified:
                self.banned_patches[p] = outcome.status
                self.patch_blame.setdefault(p, []).append((knob_settings, outcome.status))
            return f"patch blamed: {', '.join(unverified)} ({outcome.status})"
        if outcome.status != "oom":
            self.config_failures.add((knob_settings, outcome.status))
            for p, why in list(self.patch_blame.items()):
                if all(w in self.config_failures for w in why):
                    del self.banned_patches[p], self.patch_blame[p]
        if outcome.status == "oom":
            return self._record_oom(knob_settings, outcome, mem_delta)
        self.crash_records.append(knob_settings)
        self.crash_kinds.append(failure_signature(outcome.status, outcome.reason) if self.signatures else "")
        self.crash_reasons.append(outcome.reason or "")
        self._rederive()
        return f"conflict: {self.minimal_tuple(knob_settings)}"

    def _record_oom(self, settings: frozenset[Setting], outcome: Outcome,
                    mem_delta: Callable[[Setting], float]) -> str:
        if not settings:
            return "reference OOM"
        ranked = sorted(settings, key=lambda s: (-mem_delta(s), settings_key(s)))
        spender = ranked[0]
        shortfall = max(0.0, (outcome.requested_gib or 0.0) - (outcome.capacity_gib or 0.0))
        self.needs_saver[spender] = max(self.needs_saver.get(spender, 0.0), shortfall)
        savers = frozenset(s for s in settings if s != spender and mem_delta(s) < 0)
        if savers:
            tried = self.saver_sets_failed.setdefault(spender, set())
            tried.add(savers)
            if len(tried) >= self.exclude_after:
                self.excluded.add(spender)
        return f"oom: {settings_key(spender)} needs a saver covering {shortfall:.1f} GiB"

    def suspects(self, settings: frozenset[Setting]) -> list[Tuple_]:
        """The smallest co-occurring tuples of ``settings`` (pairs, else triples; the setting itself for a
        one-setting record) that no passing run contains: the hypotheses a crash of ``settings`` leaves open."""
        if len(settings) == 1:
            only = next(iter(settings))
            if any(only in p for p in self.passing) or self._needs_partner(only):
                return []
            return [(only,)]
        for size in (2, 3):
            options = [_canon_tuple(t) for t in combinations(settings, size)
                       if not any(set(t) <= p for p in self.passing)]
            if options:
                return options
        return []

    def _needs_partner(self, setting: Setting) -> bool:
        """Whether a crash of ``setting`` alone leaves it open as "needs a partner" rather than broken: it
        crashed alone (not a numerics rejection) and also crashed in a record beside other settings (in either
        order), so the one-setting crash is as well explained by a missing requirement (unpadding needs flash
        attention) as by the setting being broken, and banning it outright would lose it for good."""
        return ((frozenset((setting,)), "crash") in self.config_failures
                and any(setting in r and len(r) > 1 for r in self.crash_records))

    def minimal_tuple(self, settings: frozenset[Setting]) -> Tuple_ | None:
        """Smallest pair/triple of ``settings`` absent from all passing runs (None if none).

        Among several, prefer the tuple implicated by the most crash records of the kind ``settings`` last
        failed with (all records when it has no crash record), then (with ``names``) the one with the most
        settings that failure's message names, then one another campaign suspected (``suspected``), then the
        most aggressive one (largest summed prior |effect|, ``risk``), then a canonical order.
        """
        last = next(((k, why) for r, k, why in zip(reversed(self.crash_records), reversed(self.crash_kinds),
                                                   reversed(self.crash_reasons)) if r == settings), (None, ""))
        return self._pick(self.suspects(settings), last[0], self._named(last[1], settings))

    def _named(self, reason: str, settings: frozenset[Setting]) -> set[Setting]:
        """The settings of ``settings`` that ``reason`` names; empty without ``names`` or a reason."""
        return named_settings(reason, settings) if self.names and reason else set()

    def _pick(self, options: list[Tuple_], kind: str | None = None,
              named: AbstractSet[Setting] = frozenset()) -> Tuple_ | None:
        """The tuple :meth:`minimal_tuple` bans among a record's open ``options`` (None if there are none),
        counting the evidence among crash records of ``kind`` (all records when None) and ranking ties by how
        many of its settings are in ``named`` (those the record's message names, :meth:`_named`)."""
        if not options:
            return None
        risk = self.risk
        hinted = {_tkey(t) for t in self.suspected}

        def score(t: Tuple_) -> tuple:
            return (-self._tuple_hits(t, kind), -sum(1 for s in t if s in named), _tkey(t) not in hinted,
                    -sum(abs(risk(s)) for s in t), _tkey(t))
        return min(options, key=score)

    def shares(self, settings: frozenset[Setting]) -> list[float]:
        """Per crash record (in order), the share of its open hypotheses (:meth:`suspects`) that ``settings``
        contains: how likely a candidate is to repeat that crash if its cause is one of the open tuples, each
        counted as equally likely (0 for a record with none open)."""
        return [sum(1 for t in hyps if set(t) <= settings) / len(hyps) if hyps else 0.0 for hyps in self._suspects]

    def common_factors(self) -> dict[Setting, frozenset[int]]:
        """Settings held by at least two crash records (by index, the value) and by no passing run, each the only
        such setting that all of its records hold (a first wave of crashes whose records all share several untried
        settings names none: any of them may be the cause).

        The pair rule (:meth:`suspects`) never names one setting of a multi-setting record, so a setting that
        fails on its own (FP8 attention that shifts the loss) is blamed on one new pair per crash; a setting
        common to two failures that has never passed is the simplest explanation of both, and the controller
        keeps its holders from running several at once (:class:`~infrarsi.controller.search.admission.NearCopies`)."""
        counts: dict[Setting, list[int]] = {}
        for i, rec in enumerate(self.crash_records):
            for s in rec:
                if s[0] != PATCH:
                    counts.setdefault(s, []).append(i)
        never = {s: frozenset(idx) for s, idx in counts.items() if not any(s in p for p in self.passing)}
        return {s: idx for s, idx in never.items()
                if len(idx) >= 2 and not any(o != s and idx <= other for o, other in never.items())}

    def open_suspects(self) -> list[list[Tuple_]]:
        """Per crash record (in order), its open hypotheses (:meth:`suspects`); read it, do not change it."""
        return self._suspects

    def requirements_of(self, settings: frozenset[Setting]) -> list[tuple[Setting, Setting]]:
        """The "needs a partner" hypotheses a crash of ``settings`` leaves open: ``(s, r)`` with ``s`` in the
        record and ``r`` not, where ``s`` has passed and every passing run holding ``s`` also held ``r``
        (overlapping the parameter all-gather needs the distributed optimizer), or where ``s`` never passed and
        every passing run held ``r`` (FP8 needs torch.compile, which every start carried).  A tuple of present
        settings cannot say "without r", so such a crash would otherwise stay unexplained, or be pinned on a
        pair of ``s`` with a setting it merely never passed beside."""
        out: list[tuple[Setting, Setting]] = []
        for s in sorted(settings, key=settings_key):
            # never passed: it may need what every passing run held (FP8 needs torch.compile)
            with_s = [p for p in self.passing if s in p] or self.passing
            if not with_s:
                continue
            for r in sorted(frozenset.intersection(*with_s) - settings - {s}, key=settings_key):
                if r[0] != s[0] and r[0] != PATCH:
                    out.append((s, r))
        return out

    def _records_of(self, kind: str | None) -> list[frozenset[Setting]]:
        """The crash records of ``kind`` (all of them when None): the evidence one record's explanation counts."""
        return [rec for rec, k in zip(self.crash_records, self.crash_kinds) if kind in (None, k)]

    def _tuple_hits(self, t: Tuple_, kind: str | None = None) -> int:
        """How many crash records (of ``kind``; all when None) hold every setting of ``t``."""
        return sum(1 for rec in self._records_of(kind) if set(t) <= rec)

    def _requirement_hits(self, req: tuple[Setting, Setting], kind: str | None = None) -> int:
        """How many crash records (of ``kind``; all when None) hold ``s`` without ``r``."""
        s, r = req
        return sum(1 for rec in self._records_of(kind) if s in rec and r not in rec)

    def _rederive(self) -> None:
        banned: dict[tuple[str, ...], Tuple_] = {}
        required: dict[tuple[str, str], tuple[Setting, Setting]] = {}
        self.unexplained = 0
        self._suspects = [self.suspects(rec) for rec in self.crash_records]
        for rec, kind, why, hyps in zip(self.crash_records, self.crash_kinds, self.crash_reasons, self._suspects):
            reqs = self.requirements_of(rec)
            named = self._named(why, rec | {q[1] for q in reqs})  # the record's settings and missing partners
            t = self._pick(hyps, kind, named)
            if reqs:
                # a requirement explains the record only when it accounts for more crash records of its kind
                # than any open tuple does (ties keep the tuple: the pair ban is the older, better-measured rule),
                # or (with ``names``) as many, when the message names both the setting and its missing partner
                # ("the float8 training path requires torch.compile") and fewer settings of the tuple
                hits, n_named, best = max(((self._requirement_hits(q, kind), len(named & set(q)), q) for q in reqs),
                                          key=lambda h: (h[0], h[1], settings_key(h[2][1])))
                t_hits = self._tuple_hits(t, kind) if t is not None else 0
                t_named = sum(1 for x in t if x in named) if t is not None else 0
                if hits > t_hits or (hits == t_hits and n_named == 2 and t_named < 2):
                    required[(settings_key(best[0]), settings_key(best[1]))] = best
                    continue
            if t is None:
                self.unexplained += 1
            else:
                banned[_tkey(t)] = t
        self.banned = [banned[k] for k in sorted(banned)]
        self.requirements = [required[k] for k in sorted(required)]

    def blocked(self, settings: frozenset[Setting]) -> str | None:
        """Why a candidate with these settings must not run, or None if it may."""
        for s in settings:
            if s[0] == PATCH and s[1] in self.banned_patches:
                return f"patch {s[1]} banned"
            if s in self.excluded:
                return f"{settings_key(s)} excluded after OOM with {self.exclude_after} saver sets"
        for t in list(self.banned) + list(self.known_conflicts):
            if set(t) <= settings:
                return "conflict " + " & ".join(settings_key(s) for s in t)
        for need, partner in self.all_requirements():
            if need in settings and partner not in settings:
                return f"{settings_key(need)} needs {settings_key(partner)}"
        return None

    def all_requirements(self) -> list[tuple[Setting, Setting]]:
        """The requirements ``blocked`` enforces: this ledger's own, then the known ones not among them."""
        own = set(self.requirements)
        return list(self.requirements) + [q for q in self.known_requirements if q not in own]

    def summary(self) -> dict:
        return {
            "banned_tuples": [[settings_key(s) for s in t] for t in self.banned],
            "requirements": [[settings_key(s), settings_key(r)] for s, r in self.requirements],
            "needs_saver_gib": {settings_key(s): g for s, g in sorted(self.needs_saver.items(), key=lambda x: settings_key(x[0]))},
            "excluded": sorted(settings_key(s) for s in self.excluded),
            "banned_patches": dict(sorted(self.banned_patches.items())),
            "verified_patches": sorted(self.verified_patches),
        }
