"""Retrieval and transfer of experience (issue 13, item 3; the paper's section 5).

Pure functions on the frozen records of :mod:`.records`: nothing here touches the store or the ORM, so the search,
``doctor`` and ``infrarsi bench transfer`` share one implementation.

**Scope check** of a record measured in environment R for a target environment T (:func:`scope`):

- the framework must match (a record from another framework is *incompatible* and discarded);
- *covered* when the model family and the sequence-length bucket match and, for a ``balance`` mechanism, also the
  GPU SKU, the node count, the GPUs per node, the fabric (interconnect), the parameter bucket and the parallel
  layout;
- *partial* otherwise.  A field unknown on either side never matches (legacy records are partial at best).

**Distance** (:func:`distance`): ``d = [SKU differs] + [node count differs] + |ln(params_R / params_T)| +
|ln(seq_R / seq_T)| + 0.25 x (reference-state mismatches)``, where the reference state of an effect is its
environment's ``reference_state`` overridden by the effect's conditioning, compared mechanism by mechanism with
the target's reference state (only where both name the mechanism).  An unknown parameter count or sequence length
counts as :data:`UNKNOWN_TERM` (a factor of e).

**Ranking**: coverage (covered before partial), then evidence tier (``verified-rerun`` first), then ``d``, then
a deterministic tie-break.

**Transfer into the search** (:func:`search_experience`): every retrieved effect of a target knob setting is read
as a noisy measurement of that setting's effect here, with variance ``noise_floor^2 + (TAU_DISTANCE * d)^2``
(plus ``TAU_PARTIAL^2`` when partial and ``TAU_LEGACY^2`` for legacy rows); the records' inverse-variance mean
(with their spread added to its variance) is combined with the knob's own prior (stated, or 0 with the search's
default SD) into the setting's prior mean and SD.  Records therefore only move priors: target observations
always govern the posterior.  The same weighting gives the per-setting memory priors (GiB) from effects that
measured a memory delta.  The best observation of the best-ranked source campaign drives the first of the three
starts (:mod:`.start`), and minimal conflict tuples of covered observations become known
conflicts (an OOM conflict only when the target has no more memory per GPU than the record).  Setting priors carry
their smallest distance: a search stalled on an incumbent from experience measured elsewhere (distance > 0) sweeps
the levers retrieval could not cover (``controller/search/refine.py``).

**Coverage grades** (:func:`knob_grades`, printed and frozen by ``doctor``): ``covered`` (a covered effect),
``partial`` (only partial-scope effects), ``null`` (no effect, but compatible observations ran a non-reference
value: measured, nothing beyond the noise gate), ``unobserved`` (nothing).

Modes: ``filtered`` (the scope check, distance and ranking) and ``all`` (every record of a matching mechanism as
if covered at distance 0: the unfiltered baseline of ``infrarsi bench transfer``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

from infrarsi.controller.experience.mechanisms import (canonical_value, hardware_bound, mechanism_class,
                                                       mechanism_for, value_key)
from infrarsi.controller.experience.records import Effect, Environment, Observation, tier_rank

Coverage = Literal["covered", "partial", "incompatible"]
Grade = Literal["covered", "partial", "null", "unobserved"]
Mode = Literal["filtered", "all"]
MODES: tuple[str, ...] = ("filtered", "all")

#: the order of coverage in rankings (higher first)
COVERAGE_RANK: Mapping[str, int] = {"covered": 2, "partial": 1, "incompatible": 0}
#: weight of one reference-state mismatch in the distance
REF_STATE_WEIGHT = 0.25
#: the distance term for a parameter count or sequence length unknown on either side
UNKNOWN_TERM = 1.0
#: prior SD (log-speedup) a record gains per unit of distance when read as a measurement of the target's effect
TAU_DISTANCE = 0.04
#: extra prior SD of a partial-scope record (it may not transfer at all)
TAU_PARTIAL = 0.20
#: extra prior SD of a legacy (pre-protocol) record
TAU_LEGACY = 0.05
#: noise floor assumed for a record that states none
DEFAULT_NOISE_FLOOR = 0.02
#: memory: SD (GiB) a memory delta gains per unit of distance, and for a partial record
TAU_MEM_DISTANCE = 2.0
TAU_MEM_PARTIAL = 4.0


# ---------------------------------------------------------------------------------------------- target knobs
@dataclass(frozen=True)
class TargetKnob:
    """One searched knob of the target, normalized onto the catalog.

    ``mechanism`` is the name its records are filed under (:func:`.mechanisms.mechanism_for`: the catalog's, else
    the knob name as an uncatalogued mechanism, exactly as write-back files them); ``canonical`` maps each value's
    :func:`value_key` to its canonical value string.
    """

    name: str
    values: tuple[Any, ...]
    reference: Any
    mechanism: str | None
    klass: str
    canonical: Mapping[str, str]

    def canonical_of(self, value: Any) -> str:
        """The canonical string of one of this knob's values."""
        return self.canonical[value_key(value)]

    def value_for(self, canonical: str) -> Any | None:
        """This knob's value whose canonical form is ``canonical`` (the first in value order), else None."""
        for v in self.values:
            if self.canonical[value_key(v)] == canonical:
                return v
        return None

    @property
    def reference_canonical(self) -> str:
        return self.canonical_of(self.reference)


def target_knob(name: str, values: Sequence[Any], reference: Any, mechanism: str | None = None,
                canonical: Mapping[Any, Any] | None = None) -> TargetKnob:
    """Normalize one knob (contract knob or landscape dict fields) the way write-back files its records."""
    mech = mechanism_for(name, mechanism)
    cmap = {value_key(v): canonical_value(mech, v, canonical) for v in values}
    return TargetKnob(name=name, values=tuple(values), reference=reference, mechanism=mech,
                      klass=mechanism_class(mech), canonical=cmap)


def target_knobs(knobs: Iterable[Any]) -> tuple[TargetKnob, ...]:
    """TargetKnobs from contract :class:`Knob` models or landscape/contract dicts (name, values, reference and
    optional mechanism, canonical)."""
    out = []
    for k in knobs:
        get = (lambda key, default=None, _k=k: _k.get(key, default)) if isinstance(k, Mapping) else \
            (lambda key, default=None, _k=k: getattr(_k, key, default))
        out.append(target_knob(str(get("name")), list(get("values")), get("reference"), get("mechanism"),
                               get("canonical")))
    return tuple(out)


def reference_state(knobs: Iterable[TargetKnob]) -> dict[str, str]:
    """mechanism -> canonical value of the reference configuration (for :class:`Environment.reference_state`)."""
    return {k.mechanism: k.reference_canonical for k in knobs if k.mechanism}


# ---------------------------------------------------------------------------------------------- scope, distance
def seq_bucket(seq_len: int | None) -> int | None:
    """Power-of-two bucket of a sequence length: ceil(log2(seq_len)) (3000 and 4096 share bucket 12)."""
    if not seq_len or seq_len <= 0:
        return None
    return int(math.ceil(math.log2(seq_len) - 1e-9))


def param_bucket(params: float | None) -> int | None:
    """Half-decade bucket of a parameter count: floor(2 log10(params)) (1e9-3.16e9, 3.16e9-1e10, ...)."""
    if not params or params <= 0:
        return None
    return int(math.floor(2.0 * math.log10(params) + 1e-9))


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return a == b


def scope(record: Environment, target: Environment, klass: str, mechanism: str | None = None) -> Coverage:
    """Covered, partial or incompatible (see the module docstring); a hardware-bound kernel ``mechanism``
    (:func:`.mechanisms.hardware_bound`, FP8) is covered only on the same GPU SKU."""
    if record.framework is not None and target.framework is not None and not _same(record.framework,
                                                                                    target.framework):
        return "incompatible"
    if record.framework is None or target.framework is None:
        return "partial"
    covered = _same(record.model_family, target.model_family) and \
        _same(seq_bucket(record.seq_len), seq_bucket(target.seq_len))
    if covered and klass == "kernel" and hardware_bound(mechanism):
        covered = _same(record.gpu_sku, target.gpu_sku)
    if covered and klass != "kernel":
        covered = all(_same(a, b) for a, b in (
            (record.gpu_sku, target.gpu_sku), (record.nodes, target.nodes),
            (record.gpus_per_node, target.gpus_per_node), (record.interconnect, target.interconnect),
            (param_bucket(record.params), param_bucket(target.params)), (record.parallel, target.parallel)))
    return "covered" if covered else "partial"


def sign_transfers(record: Environment | None, target: Environment, klass: str, mechanism: str | None) -> bool:
    """Whether a record's *sign* carries to the target: always for an ordinary kernel mechanism; for a balance or
    hardware-bound one (FP8) only from the same GPU SKU (these are the effects that flip between generations)."""
    if klass == "kernel" and not hardware_bound(mechanism):
        return True
    return record is not None and _same(record.gpu_sku, target.gpu_sku)


def _log_ratio(a: float | None, b: float | None) -> float:
    if not a or not b or a <= 0 or b <= 0:
        return UNKNOWN_TERM
    return abs(math.log(float(a) / float(b)))


def distance(record: Environment, target: Environment, conditioning: Mapping[str, str] | None = None) -> float:
    """The paper's distance d between a record's environment (its reference state overridden by
    ``conditioning``) and the target's."""
    d = 0.0 if _same(record.gpu_sku, target.gpu_sku) else 1.0
    d += 0.0 if _same(record.nodes, target.nodes) else 1.0
    d += _log_ratio(record.params, target.params) + _log_ratio(record.seq_len, target.seq_len)
    state = {**record.reference_state, **(conditioning or {})}
    d += REF_STATE_WEIGHT * sum(1 for m, v in state.items()
                                if m in target.reference_state and str(target.reference_state[m]) != str(v))
    return d


# ---------------------------------------------------------------------------------------------- retrieval
@dataclass(frozen=True)
class Retrieved:
    """One effect mapped onto a target knob setting, with its coverage and distance."""

    effect: Effect
    knob: str
    value: Any
    coverage: Coverage
    distance: float
    #: False when the effect is of a balance or hardware-bound mechanism measured on another SKU
    #: (:func:`sign_transfers`): it grades the knob and may carry a memory delta, but no speed prior
    signed: bool = True

    def rank_key(self) -> tuple:
        """Sort key: coverage, evidence tier, distance, then a deterministic tie-break."""
        e = self.effect
        return (-COVERAGE_RANK[self.coverage], -tier_rank(e.tier), self.distance, self.knob, value_key(self.value),
                e.campaign, e.trial, e.id or 0)


def _effect_env(effect: Effect, environments: Mapping[str, Environment] | None) -> Environment | None:
    if effect.env is not None:
        return effect.env
    return (environments or {}).get(effect.environment)


def retrieve(effects: Iterable[Effect], target: Environment, knobs: Sequence[TargetKnob], mode: Mode = "filtered",
             environments: Mapping[str, Environment] | None = None) -> list[Retrieved]:
    """Effects that describe a non-reference setting of a target knob, ranked; incompatible ones discarded.

    An effect matches a knob with the same mechanism and a non-reference value of the same canonical value.
    ``mode="all"`` keeps every such effect as covered at distance 0 (no scope check, no distance).  Effects
    whose environment is unknown are treated as partial at distance :data:`UNKNOWN_TERM` x 2 in ``filtered``.
    """
    if mode not in MODES:
        raise ValueError(f"retrieval mode {mode!r}: choose from {', '.join(MODES)}")
    by_mech: dict[str, list[TargetKnob]] = {}
    for k in knobs:
        if k.mechanism:
            by_mech.setdefault(k.mechanism, []).append(k)
    out: list[Retrieved] = []
    for e in effects:
        for k in by_mech.get(e.mechanism, ()):
            value = k.value_for(str(e.value))
            if value is None or value == k.reference or str(e.value) == k.reference_canonical:
                continue
            if mode == "all":
                out.append(Retrieved(e, k.name, value, "covered", 0.0))
                continue
            env = _effect_env(e, environments)
            klass = mechanism_class(e.mechanism) if e.klass not in ("kernel", "balance") else e.klass
            signed = sign_transfers(env, target, klass, e.mechanism)
            if env is None:
                out.append(Retrieved(e, k.name, value, "partial", 2 * UNKNOWN_TERM, signed))
                continue
            cov = scope(env, target, klass, e.mechanism)
            if cov == "incompatible":
                continue
            out.append(Retrieved(e, k.name, value, cov, distance(env, target, e.conditioning), signed))
    out.sort(key=Retrieved.rank_key)
    return out


def knob_grades(knobs: Sequence[TargetKnob], retrieved: Iterable[Retrieved],
                observations: Iterable[Observation] = (), environments: Mapping[str, Environment] | None = None,
                target: Environment | None = None, mode: Mode = "filtered") -> dict[str, Grade]:
    """Coverage grade of every knob: ``covered`` (some covered effect), ``partial`` (only partial-scope effects),
    ``null`` (no effect, but compatible observations ran one of its non-reference values: the bank measured it
    and nothing cleared the noise gate) or ``unobserved`` (the bank knows nothing of it here)."""
    best: dict[str, int] = {}
    for r in retrieved:
        best[r.knob] = max(best.get(r.knob, 0), COVERAGE_RANK[r.coverage])
    seen: set[str] = set()
    for o in observations:
        env = (environments or {}).get(o.environment)
        if mode == "filtered" and target is not None and (env is None or scope(env, target, "kernel") ==
                                                           "incompatible"):
            continue
        if not _obs_ok(o):
            continue
        for k in knobs:
            if k.mechanism in o.canonical:
                v = k.value_for(str(o.canonical[k.mechanism]))
                if v is not None and v != k.reference:
                    seen.add(k.name)
    grades: dict[str, Grade] = {}
    for k in knobs:
        rank = best.get(k.name, 0)
        grades[k.name] = "covered" if rank == 2 else "partial" if rank == 1 else \
            "null" if k.name in seen else "unobserved"
    return grades


# ---------------------------------------------------------------------------------------------- priors
def record_sd(r: Retrieved) -> float:
    """SD of one retrieved effect read as a measurement of the target setting's effect."""
    floor = r.effect.noise_floor if r.effect.noise_floor and r.effect.noise_floor > 0 else DEFAULT_NOISE_FLOOR
    var = floor ** 2 + (TAU_DISTANCE * r.distance) ** 2
    if r.coverage == "partial":
        var += TAU_PARTIAL ** 2
    if r.effect.tier == "legacy":
        var += TAU_LEGACY ** 2
    return math.sqrt(var)


def _pool(xs: Sequence[float], sds: Sequence[float]) -> tuple[float, float]:
    """Inverse-variance mean of measurements and its SD, widened by their spread around that mean."""
    w = [1.0 / (s * s) for s in sds]
    sw = sum(w)
    mean = sum(wi * x for wi, x in zip(w, xs)) / sw
    spread = sum(wi * (x - mean) ** 2 for wi, x in zip(w, xs)) / sw if len(xs) > 1 else 0.0
    return mean, math.sqrt(1.0 / sw + spread)


def combine(prior_mean: float, prior_sd: float, mean: float, sd: float) -> tuple[float, float]:
    """Gaussian product of a prior N(prior_mean, prior_sd^2) and an evidence N(mean, sd^2)."""
    p0, p1 = 1.0 / prior_sd ** 2, 1.0 / sd ** 2
    return (p0 * prior_mean + p1 * mean) / (p0 + p1), math.sqrt(1.0 / (p0 + p1))


def _one_estimate_per_campaign(rs: Sequence[Retrieved]) -> list[Retrieved]:
    """Per source campaign, either its measured records of a setting (re-run and paired) or its model record
    (``verified-model``), whichever transfers more precisely (the smaller pooled :func:`record_sd`; measured on a
    tie): both come from the same runs, so pooling them would count that evidence twice."""
    by: dict[str, list[Retrieved]] = {}
    for r in rs:
        by.setdefault(r.effect.campaign, []).append(r)
    out: list[Retrieved] = []
    for group in by.values():
        model = [r for r in group if r.effect.tier == "verified-model"]
        measured = [r for r in group if r.effect.tier != "verified-model"]
        if model and measured:
            sd_m = _pool([r.effect.log_speedup for r in measured], [record_sd(r) for r in measured])[1]
            sd_x = _pool([r.effect.log_speedup for r in model], [record_sd(r) for r in model])[1]
            group = measured if sd_m <= sd_x else model
        out += group
    return [r for r in rs if r in out]


def setting_priors(retrieved: Sequence[Retrieved], base: Mapping[tuple[str, Any], tuple[float, float]],
                   default_sd: float = 0.10) -> list[dict[str, Any]]:
    """Per target setting with records: ``{"knob", "value", "log_speedup", "prior_sd", "records", "coverage",
    "distance"}`` and, where records measured memory, ``"mem_gib"``/``"mem_sd"``.  Records whose sign does not
    transfer (``Retrieved.signed`` False: balance or FP8 effects from another SKU) never move the speed prior: a
    setting with only such records gets no ``log_speedup``/``prior_sd`` (the knob's own prior stays), only the
    memory prior and ``"unsigned_gain"``, the largest |log-speedup| measured elsewhere (the setting mattered on
    other hardware and its sign here is unknown: the search probes it, ``probes.contrarian``).

    ``base`` maps (knob, value) to the knob's own prior (mean, SD); settings not in it start from (0,
    ``default_sd``).  Deterministic in the order of ``retrieved``; settings are listed in first-retrieved order.
    """
    groups: dict[tuple[str, Any], list[Retrieved]] = {}
    for r in retrieved:
        groups.setdefault((r.knob, r.value), []).append(r)
    out = []
    for (knob, value), rs in groups.items():
        row: dict[str, Any] = {"knob": knob, "value": value}
        speed = _one_estimate_per_campaign([r for r in rs if r.signed])
        m0, s0 = base.get((knob, value), (0.0, default_sd))
        s0 = s0 if s0 > 0 else default_sd
        if speed:
            mean, sd = _pool([r.effect.log_speedup for r in speed], [record_sd(r) for r in speed])
            row["log_speedup"], row["prior_sd"] = combine(m0, s0, mean, sd)
        else:
            row["unsigned_gain"] = max(abs(float(r.effect.log_speedup)) for r in rs)
        row.update({"records": len(rs), "coverage": rs[0].coverage, "distance": min(r.distance for r in rs)})
        # memory deltas measured against the reference state only: a paired delta measured on top of other
        # settings (its conditioning) is that delta under them, and memory is not additive (activations per
        # micro-batch are divided by TP/EP and shrunk by flash or recompute), so such a delta says little about
        # the target's reference (a micro-batch measured beside TP2 and EP8 on a larger GPU looks three times
        # cheaper than it is); those settings keep their own memory prior
        mem = [r for r in rs if r.effect.mem_delta_gib is not None and not r.effect.conditioning]
        if mem:
            sds = [math.sqrt(1.0 + (TAU_MEM_DISTANCE * r.distance) ** 2
                             + (TAU_MEM_PARTIAL ** 2 if r.coverage == "partial" else 0.0)) for r in mem]
            row["mem_gib"], row["mem_sd"] = _pool([float(r.effect.mem_delta_gib) for r in mem], sds)
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------- starts, conflicts
def _obs_ok(o: Observation) -> bool:
    bad = {"fail", "failed", "reject", "rejected", False}
    return (o.step_time_s is not None and o.step_time_s > 0 and not o.patches
            and str(o.verdicts.get("outcome", "ok")) == "ok" and not any(v in bad for v in o.verdicts.values()))


def _obs_scope(o: Observation, env: Environment | None, target: Environment, mode: Mode,
               mechanism: str, software: bool = False) -> Coverage:
    """An observation's coverage of one mechanism; ``software``: for a crash conflict, where a hardware-bound
    kernel mechanism (FP8) is scoped like any kernel mechanism (whether FP8 *helps* depends on the SKU,
    whether it crashes beside another kernel does not)."""
    if mode == "all":
        return "covered"
    if env is None:
        return "partial"
    return scope(env, target, mechanism_class(mechanism), None if software else mechanism)


def passed(o: Observation) -> bool:
    """Whether an observation ran to the end (a step time) without a failed outcome: a passing run."""
    return o.step_time_s is not None and str(o.verdicts.get("outcome", "ok")) == "ok"


def target_setting(by_mech: Mapping[str, TargetKnob], mech: str, canon: Any) -> tuple[str, Any] | None:
    """A record's (mechanism, canonical value) as a non-reference setting ``(knob, value)`` of the target's knob
    with that mechanism; None when no target knob has the mechanism or the value maps onto none or the reference."""
    k = by_mech.get(mech)
    v = k.value_for(str(canon)) if k is not None else None
    return None if k is None or v is None or v == k.reference else (k.name, v)


def nonref_settings(o: Observation, env: Environment | None) -> frozenset[tuple[str, str]]:
    """An observation's (mechanism, canonical value) pairs that differ from its environment's reference state."""
    ref = env.reference_state if env is not None else {}
    return frozenset((m, str(v)) for m, v in o.canonical.items() if str(ref.get(m)) != str(v))


def _tuple_key(tup: Iterable[Sequence[Any]]) -> frozenset[tuple[str, str]]:
    """A conflict tuple as a set of (mechanism, canonical value) strings, for comparison."""
    return frozenset((str(m), str(v)) for m, v in tup)


def _pinned(tup: Sequence[Sequence[str]], observations: Sequence[Observation],
            environments: Mapping[str, Environment]) -> bool:
    """Whether a crash conflict tuple of a source campaign is the only explanation its observations leave: some
    crash of that campaign containing it has no other tuple of the same size that no passing run of the campaign
    contains.  The source's failure ledger picks one minimal tuple among several when its passing runs cannot
    tell them apart (FP8 beside compile or beside grouped GEMM, in one crash); a known conflict is a hard ban on
    the target, so only a tuple the source pinned down is carried.  A crash that a "needs a partner" hypothesis
    also fits (:func:`partner_hypotheses`: FP8 crashed without compile, and every passing FP8 run had compile)
    pins nothing either: its one unseen pair (FP8 beside no activation checkpointing) may be innocent, and as a
    ban it would keep the target's peak out of reach for the whole campaign."""
    t = _tuple_key(tup)
    camps = {o.campaign for o in observations if any(_tuple_key(c) == t for c in o.conflicts)}
    for camp in sorted(camps):
        obs = [o for o in observations if o.campaign == camp]
        passing = [nonref_settings(o, environments.get(o.environment)) for o in obs if passed(o)]
        for o in obs:
            if str(o.verdicts.get("outcome", "")) not in ("crash", "rejected"):
                continue
            if not any(_tuple_key(c) == t for c in o.conflicts):
                continue
            sets = nonref_settings(o, environments.get(o.environment)) | t
            others = [frozenset(c) for c in itertools.combinations(sorted(sets), len(t)) if frozenset(c) != t]
            if all(any(c <= p for p in passing) for c in others) and not partner_hypotheses(sets, passing):
                return True
    return False


def partner_hypotheses(sets: frozenset[tuple[str, str]],
                       passing: Sequence[frozenset[tuple[str, str]]]) -> set[tuple[tuple[str, str], str]]:
    """The "needs a partner" hypotheses a crash of ``sets`` leaves open, by mechanism: ``(s, m)`` with ``s`` in the
    crash, mechanism ``m`` at its reference in the crash, and every passing run with ``s`` holding ``m`` at some
    non-reference value (``passing``: the non-reference settings of the campaign's passing runs).  By mechanism,
    not value, so that a partner of several values (sequence parallelism needs TP 2 *or* 4, which no one
    requirement says) still counts as another explanation."""
    out: set[tuple[tuple[str, str], str]] = set()
    present = {m for m, _ in sets}
    for st in sets:
        with_s = [p for p in passing if st in p]
        if with_s:
            mechs = set.intersection(*({m for m, _ in p} for p in with_s))
            out |= {(st, m) for m in mechs - present if m != st[0]}
    return out


def _never_ran(mech: str, canon: str, o: Observation, env: Environment | None, target: Environment,
               ran: Mapping[str, set[tuple[str, str]]]) -> bool:
    """Whether a crash record's setting of a hardware-bound mechanism (:func:`.mechanisms.hardware_bound`, FP8)
    comes from another GPU SKU where no run of its campaign passed with it: then the crash may be the hardware's
    (an A100 has no FP8 tensor cores), and its tuple is carried as a suspect however well it was pinned (a ban
    would keep FP8 from a GPU that runs it; a suspect is tested there once, ``probes.contrarian``)."""
    return (hardware_bound(mech) and (env is None or env.gpu_sku != target.gpu_sku)
            and (mech, canon) not in ran.get(o.campaign, set()))


def conflicts(observations: Iterable[Observation], environments: Mapping[str, Environment], target: Environment,
              knobs: Sequence[TargetKnob], mode: Mode = "filtered") -> list[dict[str, Any]]:
    """Known conflicts for the search: ``{"conflict": [[knob, value], ...]}`` per minimal conflict tuple that maps
    onto target settings (every (mechanism, canonical value) onto a non-reference value of a target knob).  A known
    conflict is a hard ban in the search, so in ``filtered`` a crash tuple is carried as one only when the source
    pinned it down (:func:`_pinned`); a tuple the source blamed without pinning it down is carried as a *suspect*,
    ``{"suspect": [[knob, value], ...]}``: no ban; the search avoids it until its own ledger explains a crash of one
    of its settings otherwise, and the ledger blames it first when a crash of the target leaves it open beside
    other tuples equally implicated (FP8 beside grouped GEMM rather than beside flash).

    ``filtered``: only from observations that cover every mechanism of the tuple (for a crash, FP8 counts as an
    ordinary kernel mechanism: the crash of a kernel combination is the software's, not the SKU's, except that a
    crash holding FP8 from another SKU where FP8 never passed is only a suspect, :func:`_never_ran`); a conflict of an
    observation that ran out of memory only when the target has no more memory per GPU than the record's
    environment."""
    by_mech = {k.mechanism: k for k in knobs if k.mechanism}
    observations = list(observations)
    ran: dict[str, set[tuple[str, str]]] = {}  # per campaign, the (mechanism, canonical value) of passing runs
    for o in observations:
        if passed(o):
            ran.setdefault(o.campaign, set()).update((str(m), str(v)) for m, v in o.canonical.items())
    pinned: dict[frozenset[tuple[str, str]], bool] = {}
    seen: set[tuple] = set()
    out = []
    for o in observations:
        env = environments.get(o.environment)
        is_oom = o.oom_shortfall_gib is not None or str(o.verdicts.get("outcome", "")) == "oom"
        for tup in o.conflicts:
            kind = "conflict"
            if mode == "filtered" and not is_oom:
                key = _tuple_key(tup)
                if key not in pinned:  # the same tuple recurs across a campaign's crashes: judged once
                    pinned[key] = _pinned(tup, observations, environments)
                if not pinned[key]:
                    kind = "suspect"
            if mode == "filtered" and not is_oom and any(_never_ran(str(m), str(v), o, env, target, ran)
                                                          for m, v in tup):
                kind = "suspect"
            settings = []
            for mech, canon in tup:
                setting = target_setting(by_mech, mech, canon)
                # a crash is a software fact: FP8's SKU-bound sign does not make its crash SKU-bound
                if setting is None or _obs_scope(o, env, target, mode, mech, software=not is_oom) != "covered":
                    break
                settings.append(setting)
            else:
                if not settings:
                    continue
                if mode == "filtered" and is_oom and (env is None or env.gpu_mem_gib is None or
                                                      target.gpu_mem_gib is None or
                                                      target.gpu_mem_gib > env.gpu_mem_gib):
                    continue
                key = (kind, *sorted((n, value_key(v)) for n, v in settings))
                if key not in seen:
                    seen.add(key)
                    out.append({kind: [list(s) for s in sorted(settings, key=lambda s: (s[0], value_key(s[1])))]})
    return out


# ---------------------------------------------------------------------------------------------- for the search
def search_experience(effects: Iterable[Effect], observations: Iterable[Observation],
                      environments: Mapping[str, Environment], target: Environment, knobs: Sequence[TargetKnob],
                      base: Mapping[tuple[str, Any], tuple[float, float]] | None = None, mode: Mode = "filtered",
                      default_sd: float = 0.10) -> tuple[list[dict[str, Any]], dict[str, Grade]]:
    """Everything retrieval gives the search, as JSON-able records for ``SearchController(experience=...)``,
    plus the coverage grade of every knob.

    Records: the experience start (``{"config", "speedup"}``), one prior per setting with records
    (``{"knob", "value", "log_speedup", "prior_sd"[, "mem_gib", "mem_sd"]}``), known conflicts
    (``{"conflict": [...]}``), suspected ones (``{"suspect": [...]}``, :func:`conflicts`) and known requirements
    (``{"requires": [...]}``, :func:`.requirements.requirements`)."""
    observations = list(observations)
    got = retrieve(effects, target, knobs, mode, environments)
    records: list[dict[str, Any]] = []
    priors = setting_priors(got, base or {}, default_sd)
    evidence = {(p["knob"], p["value"]): p["log_speedup"] for p in priors
                if p["coverage"] == "covered" and "log_speedup" in p}
    # a setting the bank holds no effect of (it rode along in every run that had it) keeps the target's own
    # stated prior as its evidence: the start carries it where a cold search would start with it too
    recorded = {(p["knob"], p["value"]) for p in priors}
    for setting, (mean, _sd) in (base or {}).items():
        if setting not in recorded:
            evidence[setting] = float(mean)
    from infrarsi.controller.experience.start import first_start  # it builds on this module's scope

    start = first_start(observations, environments, target, knobs, mode, evidence)
    if start is not None:
        records.append(start)
    records += priors
    records += conflicts(observations, environments, target, knobs, mode)
    from infrarsi.controller.experience.requirements import requirements  # it builds on this module's scope

    records += requirements(observations, environments, target, knobs, mode)
    return [_stable(r) for r in records], knob_grades(knobs, got, observations, environments, target, mode)


def _stable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its top-level float fields (speedups, priors, GiB, distances) rounded to the decimals the
    search rounds its own model outputs to (``controller/search/models.py``, ``DECIMALS``).

    The measurements behind them (step-time means, the evidence fits) differ in their last bits between numpy
    builds and CPUs, and the search compares these numbers; rounded far above that noise and far below any effect
    it can resolve, a seeded transfer benchmark takes the same decisions on every machine (a configuration's
    values, nested, are never touched)."""
    from infrarsi.controller.search.models import DECIMALS  # one precision for every number the search compares

    return {k: round(v, DECIMALS) if isinstance(v, float) else v for k, v in record.items()}


__all__ = ["Coverage", "Grade", "Mode", "MODES", "TargetKnob", "target_knob", "target_knobs", "reference_state",
           "seq_bucket", "param_bucket", "scope", "passed", "target_setting", "nonref_settings", "sign_transfers", "distance", "Retrieved",
           "retrieve", "knob_grades", "record_sd", "combine", "setting_priors", "conflicts", "partner_hypotheses",
           "search_experience"]
