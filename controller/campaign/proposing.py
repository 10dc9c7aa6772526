"""Proposers inside the campaign: when they are asked, and how their answers enter the search (paper 2.2, 4.2, 4.3).

Three moments:

* ``doctor``: every ``catalog`` and ``llm`` proposer is asked for knob priors (:meth:`ProposerRunner.ask_priors`
  when the doctor state says so, by :meth:`ProposerRunner.priors_status`; :meth:`ProposerRunner.collect_priors`
  books the answers), in the background: the engine's tick never waits for a model, so one slow endpoint does not
  stall the daemon's other campaigns; the campaign stays in ``doctor`` until every answer is in.  The merged
  priors are frozen into the doctor record (``proposer_priors``), so a replayed search sees exactly what the first
  one saw; :func:`infrarsi.controller.campaign.searchglue.search_space` puts them where the contract's own priors
  go (flooring ``max(sigma_min, 0.5 |mu|)`` and the empirical-Bayes revision then apply).
* ``run``: ``llm`` and ``agent`` proposers are asked for patches when
  :meth:`~infrarsi.controller.search.controller.SearchController.patch_request` says so: the configuration
  proposals' two-sigma upside is below max(0.02, 2 sigma_pair) and every patch has been tried (``patches``
  requests), or two verified patches conflict when stacked (``complete`` requests, shown the verified diffs).
  Requests run in background threads, never more at once than ``proposers.max_concurrent`` (and each proposer's
  own ``max_concurrent``); a proposer gets a new round only after every patch of its earlier rounds was tried, at
  most :data:`MAX_ROUNDS` rounds per campaign.
* Every answer is recorded before it is used: a ledger row (:meth:`Store.add_proposer_request`) and, in the same
  step, the campaign's :class:`Scope`: accepted patches join ``Scope.patches`` with their provenance in
  ``Scope.patch_provenance`` (proposer, model, prompt digest, rationale, claimed gain and the capped prior
  input), refused ones join ``Scope.refused_patches``, and the round in ``Scope.proposal_rounds``.  The search
  is rebuilt from the scope, so a restarted engine reuses the recorded answers; a request that was in flight at a
  crash left no record and is asked again.

Patches from proposers pass the same intake (``patches.intake.check_patch``) as folder patches, run in the same
isolated trial trees and are judged by the same verifier.  Claimed gains are capped at :data:`CLAIM_CAP` and shrunk
by the controller's ``patch_kappa`` (0.5) before they enter the patch prior.  Bad output never fails a campaign: a
failed request is a ledger row with a one-line reason and the search goes on.

Which proposers are on (:func:`effective_proposers`): the contract's ``proposers:`` section when it has one, else
the site default (``proposers:`` in the daemon config), else ``[{kind: folder}]``.  A proposer that runs model- or
agent-written code is therefore never on unless the contract or the site config names it.  The folder entry is
served by ``init``'s patch intake as before (``patches.dir``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import InfrarsiError, PatchError, one_line
from infrarsi.controller.proposers.ledger import record_outcome
from infrarsi.controller.proposers.spec import FolderSpec, ProposersSpec
from infrarsi.controller.store.base import Store
from infrarsi.controller.store.records import CampaignRecord, TrialRecord
from infrarsi.controller.store.stage_records import Doctor, Scope, doctor_or_none, result_of, scope_of, scope_or_none

if TYPE_CHECKING:  # pragma: no cover
    from infrarsi.controller.proposers.base import PromptContext, Proposer, ProposerOutcome
    from infrarsi.controller.search.controller import SearchController

log = logging.getLogger("infrarsi.proposing")

#: patch rounds one proposer may be asked for in one campaign
MAX_ROUNDS = 3
#: largest claimed log-gain that enters a patch prior (the controller then multiplies by patch_kappa = 0.5)
CLAIM_CAP = 0.2
#: proposer kinds asked for knob priors at doctor, and for patches during run
PRIOR_KINDS = ("catalog", "llm")
PATCH_KINDS = ("llm", "agent")
#: trials shown in full in a prompt (the rest one line each is the prompt builder's business)
PROMPT_TRIALS = 200


# ---------------------------------------------------------------------------------------------------- which proposers
def site_proposers() -> ProposersSpec | None:
    """The site default from the daemon config (``proposers:`` in ``INFRARSI_CONFIG``), or None."""
    from infrarsi.controller.config import daemon_config

    return getattr(daemon_config(), "proposers", None)


def effective_proposers(contract: Contract, site: ProposersSpec | None = None) -> ProposersSpec:
    """The proposers a campaign uses: the contract's section when it states one, else ``site``, else the folder.

    With the site default, the contract's patch folder stays on (a folder entry is added in front when the site
    list has none and ``patches.dir`` is set)."""
    if "proposers" in contract.model_fields_set:
        return contract.proposers
    folder = [FolderSpec(kind="folder")] if contract.patches.dir else []
    if site is None:
        return ProposersSpec(entries=folder) if folder else ProposersSpec(entries=[])
    entries = list(site.entries)
    if folder and not any(e.kind == "folder" for e in entries):
        entries = folder + entries
    return ProposersSpec(entries=entries, prompt_chars=site.prompt_chars, max_concurrent=site.max_concurrent)


# --------------------------------------------------------------------------------------------------- the runner
@dataclass(frozen=True)
class ProposerDeps:
    """What the proposers need of the campaign machinery, and nothing more: the store (campaign records, trials,
    observations, the ledger), the campaign's parsed contract and a progress line."""

    store: Store
    contract_of: Callable[[CampaignRecord], Contract]
    progress: Callable[[str], None] = lambda msg: None


@dataclass
class _Request:
    campaign_id: int
    proposer: str
    kind: str  # patches | complete
    trigger: str
    tried: int  # search trials ingested when asked
    stack: tuple[str, ...] = ()
    future: Future | None = None


@dataclass
class _CampaignState:
    proposers: list["Proposer"]
    spec: ProposersSpec
    src: Path
    inflight: list[_Request] = field(default_factory=list)
    #: the doctor's prior requests, all asked in one background job (None: not asked in this process)
    doctor: Future | None = None


class ProposerRunner:
    """Per-engine state: built proposers per campaign and the requests in flight (a thread pool).  It sees the
    campaign machinery only through ``deps`` (:class:`ProposerDeps`).

    Nothing here is needed to replay a campaign: answers live in the store; this only holds work in progress."""

    def __init__(self, deps: ProposerDeps, site: ProposersSpec | None = None, *, use_site: bool = True):
        self.deps = deps
        self._site = site
        self._use_site = use_site and site is None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._campaigns: dict[int, _CampaignState] = {}

    # ---------------------------------------------------------------- setup
    def spec(self, contract: Contract) -> ProposersSpec:
        site = self._site
        if site is None and self._use_site:
            try:
                site = site_proposers()
            except InfrarsiError as exc:  # a broken site config must not fail a campaign's tick
                log.warning("site proposers ignored: %s", exc)
                site = None
        return effective_proposers(contract, site)

    def _state(self, c: CampaignRecord) -> _CampaignState:
        st = self._campaigns.get(c.id)
        if st is not None:
            return st
        from infrarsi.controller.campaign.sourcetree import prepare_source
        from infrarsi.controller.proposers.base import build_proposers
        from infrarsi.controller.settings import isolation_mode

        contract = self.deps.contract_of(c)
        spec = self.spec(contract)
        scope = scope_of(c)
        base = Path(c.workdir) / "proposers"
        base.mkdir(parents=True, exist_ok=True)
        src = base / "src"
        workdir = prepare_source(Path(c.repo_path), scope.commit, src, [], {}, scope.prefix)
        try:
            proposers = build_proposers(spec, contract=contract, repo=Path(workdir), workdir=base / "scratch",
                                        isolation=isolation_mode())
        except Exception as exc:  # noqa: BLE001 - a proposer that cannot be built never fails the campaign
            self.deps.progress(f"[{c.id}] proposers unavailable: {one_line(exc)}")
            proposers = []
        spent: dict[str, list[float]] = {}
        for r in self.deps.store.proposer_requests(c.id):  # budgets count what earlier processes spent
            acc = spent.setdefault(r.proposer, [0, 0.0])
            acc[0] += r.tokens_in + r.tokens_out
            acc[1] += r.usd or 0.0
        for p in proposers:
            if p.name in spent and hasattr(p, "seed_spent"):
                p.seed_spent(int(spent[p.name][0]), float(spent[p.name][1]))
        st = _CampaignState(proposers=proposers, spec=spec, src=Path(workdir))
        self._campaigns[c.id] = st
        return st

    def _submit(self, fn: Any, *args: Any) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="proposer")
            return self._pool.submit(fn, *args)

    def busy(self, campaign_id: int) -> bool:
        """True while a request of this campaign is in flight."""
        st = self._campaigns.get(campaign_id)
        return bool(st and st.inflight)

    def in_flight(self, campaign_id: int) -> int:
        st = self._campaigns.get(campaign_id)
        return len(st.inflight) if st else 0

    def close(self) -> None:
        """Stop accepting work; requests in flight finish in their threads (their answers are dropped)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    # ---------------------------------------------------------------- doctor
    def priors_status(self, c: CampaignRecord) -> str:
        """Where the doctor's prior requests of ``c`` stand, for the doctor state to decide on: ``"none"`` (no
        prior-giving proposer: nothing to ask), ``"unasked"`` (not asked in this process), ``"pending"`` (answers
        still coming) or ``"ready"`` (every answer in, not booked yet).  Starts nothing and reads no store."""
        if not _asks_priors(self.spec(self.deps.contract_of(c))):
            return "none"
        st = self._campaigns.get(c.id)
        if st is None or st.doctor is None:
            return "unasked"
        return "ready" if st.doctor.done() else "pending"

    def ask_priors(self, c: CampaignRecord, doctor: Doctor) -> None:
        """Ask every prior-giving proposer for knob priors in one background job (at most ``max_concurrent``
        requests at once); nothing when they were asked already or there are none."""
        spec = self.spec(self.deps.contract_of(c))
        if not _asks_priors(spec):
            return
        st = self._state(c)
        if st.doctor is not None:
            return
        askers = [p for p in st.proposers if p.kind in PRIOR_KINDS]
        st.doctor = self._submit(_ask_all, askers, self.context(c, "priors", doctor=doctor),
                                 max(1, spec.max_concurrent))
        self.deps.progress(f"[{c.id}] asking {len(askers)} proposer(s) for knob priors")

    def collect_priors(self, c: CampaignRecord, doctor: Doctor) -> dict[str, Any] | None:
        """Once every answer is in (:meth:`priors_status` ``"ready"``): record each request in the ledger and
        return the doctor-record keys ``proposer_priors`` (merged rows) and ``proposer_priors_dropped`` (one line
        per prior that named no searched knob value).  None while answers are still coming or nothing was asked."""
        st = self._campaigns.get(c.id)
        if st is None or st.doctor is None or not st.doctor.done():
            return None
        contract = self.deps.contract_of(c)
        outcomes: list[ProposerOutcome] = st.doctor.result()
        st.doctor = None
        for o in outcomes:
            self._ledger(c, o, "doctor", "priors")
        rows, dropped = merge_priors(contract, outcomes, doctor.reference_peak_mem_gib)
        for o in outcomes:
            self.deps.progress(f"[{c.id}] proposer {o.proposer}: {'ok' if o.ok else 'failed'}"
                               f"{' — ' + o.reason if o.reason else ''}")
        return {"proposer_priors": rows, "proposer_priors_dropped": dropped}

    # ---------------------------------------------------------------- run
    def step(self, c: CampaignRecord, controller: "Callable[[], SearchController]", live: list[TrialRecord]) -> bool:
        """Collect finished requests (recording them; True when the scope changed) and start new ones when the
        search asks for patches.  ``controller`` builds the current search controller (called only when needed).
        Does nothing for a campaign without ``llm``/``agent`` proposers.  Never raises for a proposer's fault."""
        contract = self.deps.contract_of(c)
        spec = self.spec(contract)
        if not any(e.kind in PATCH_KINDS for e in spec.entries):
            return False
        st = self._state(c)
        if self._collect(c, st):
            return True
        if len(st.inflight) >= spec.max_concurrent:
            return False
        from infrarsi.controller.campaign.searchglue import candidate_of

        c = self.deps.store.get_campaign(c.id)
        ctrl = controller()

        busy = [candidate_of(t) for t in live]
        why = ctrl.patch_request(busy)
        if why is None:
            return False
        rounds = scope_of(self.deps.store.get_campaign(c.id)).proposal_rounds
        tried = {s for cand, _ in ctrl.history for s in cand.patches}  # measured, not merely running
        stack: tuple[str, ...] = ()
        if why == "stack":
            asked = {tuple(r.get("stack") or ()) for r in rounds if r["kind"] == "complete"}
            asked |= {r.stack for r in st.inflight}
            todo = [tuple(sorted(s)) for s in ctrl.conflicting_stacks() if tuple(sorted(s)) not in asked]
            if todo:
                stack = todo[0]
            elif _upside_low(ctrl, busy):  # every conflict went to the proposers already
                why = "upside"
            else:
                return False
        kind = "complete" if stack else "patches"
        for p in st.proposers:
            if p.kind not in PATCH_KINDS or len(st.inflight) >= spec.max_concurrent:
                continue
            if sum(1 for r in st.inflight if r.proposer == p.name) >= max(1, p.max_concurrent):
                continue
            if any(r.proposer == p.name for r in st.inflight):
                continue  # one round at a time per proposer: the next one sees the last one's results
            mine = [r for r in rounds if r["proposer"] == p.name]
            if kind == "patches":
                if sum(1 for r in mine if r["kind"] == "patches") >= MAX_ROUNDS:
                    continue
                if any(n not in tried for r in mine for n in r.get("patches") or ()):
                    continue  # earlier proposals not measured yet: the next round should see their results
            ctx = self.context(c, kind, ctrl=ctrl, stack=stack)
            req = _Request(c.id, p.name, kind, why, len(ctrl.history), stack)
            req.future = self._submit(p.propose, ctx)
            st.inflight.append(req)
            self.deps.progress(f"[{c.id}] asking proposer {p.name} for {kind} ({why})")
        return False

    def _collect(self, c: CampaignRecord, st: _CampaignState) -> bool:
        done = [r for r in st.inflight if r.future is not None and r.future.done()]
        if not done:
            return False
        for r in done:
            st.inflight.remove(r)
            outcome = r.future.result()  # Proposer.propose is guarded (proposers/base.py): never raises
            self._admit(c, st, r, outcome)
        return True

    def _admit(self, c: CampaignRecord, st: _CampaignState, req: _Request, o: "ProposerOutcome") -> None:
        """Record one answer: its ledger row and the scope it changes (accepted patches, provenance, refusals, the
        round) in one transaction, so a crash never pays for an answer twice nor keeps one without its cost."""
        from infrarsi.controller.patches.intake import check_patch

        contract = self.deps.contract_of(c)
        fresh = self.deps.store.get_campaign(c.id)
        scope = scope_of(fresh)
        patches = dict(scope.patches)
        provenance = dict(scope.patch_provenance)
        refused = dict(scope.refused_patches)
        rounds = list(scope.proposal_rounds)
        accepted: list[str] = []
        refused_now: list[str] = []
        known = {hashlib.sha256(t.encode()).hexdigest() for t in patches.values()}
        rnd = len(rounds)
        for i, pp in enumerate((o.proposal.patches if o.ok and o.proposal else []), 1):
            name = _patch_name(o.proposer, o.prompt_digest, rnd, i, patches, refused)
            claimed = float(pp.claimed_gain)
            prior_input = max(-CLAIM_CAP, min(CLAIM_CAP, claimed))
            prov = {"proposer": o.proposer, "kind": o.kind, "model": o.model, "prompt_digest": o.prompt_digest,
                    "rationale": pp.rationale, "claimed_gain": claimed, "prior_input": prior_input,
                    "prior_mean": 0.5 * prior_input, "round": rnd, "request": req.kind,
                    "replaces": list(req.stack)}
            digest = hashlib.sha256(pp.diff.encode()).hexdigest()
            provenance[name] = prov
            try:
                if digest in known:
                    raise PatchError(f"patch {name}: the same diff as a patch already in the campaign")
                check_patch(st.src, pp.diff, contract.editable_files, contract.frozen_files,
                            contract.patches.max_changed_lines, name=name)
            except PatchError as exc:
                refused[name] = one_line(exc)
                refused_now.append(name)
                continue
            known.add(digest)
            patches[name] = pp.diff
            accepted.append(name)
        for label, why in o.dropped:
            name = _patch_name(o.proposer, o.prompt_digest, rnd, 0, patches, refused, label)
            refused[name] = why
            refused_now.append(name)
            provenance[name] = {"proposer": o.proposer, "kind": o.kind, "model": o.model,
                                "prompt_digest": o.prompt_digest, "round": rnd, "request": req.kind}
        rounds.append({"proposer": o.proposer, "kind": req.kind, "trigger": req.trigger, "stack": list(req.stack),
                       "after_trials": req.tried, "ok": o.ok, "reason": o.reason, "prompt_digest": o.prompt_digest,
                       "patches": accepted, "refused": refused_now})
        scope = scope.replace(patches=patches, patch_provenance=provenance, refused_patches=refused,
                              proposal_rounds=rounds)
        record_outcome(self.deps.store, c.id, o, request=req.kind, stage="run", scope=scope.dump())
        tail = f" — {o.reason}" if o.reason else ""
        self.deps.progress(f"[{c.id}] proposer {o.proposer} ({req.kind}): {len(accepted)} patch(es) accepted, "
                           f"{len(refused_now)} refused{tail}")

    def _ledger(self, c: CampaignRecord, o: "ProposerOutcome", stage: str, request: str) -> None:
        """One proposer-ledger row (tokens, USD when priced, wall time, outcome) for one answered request."""
        record_outcome(self.deps.store, c.id, o, request=request, stage=stage)

    # ---------------------------------------------------------------- prompt context
    def context(self, c: CampaignRecord, kind: str, *, doctor: Doctor | None = None,
                ctrl: "SearchController | None" = None, stack: tuple[str, ...] = ()) -> "PromptContext":
        """The frozen :class:`PromptContext` of a request (built from the store's records; no ORM objects)."""
        c = self.deps.store.get_campaign(c.id)
        st = self._state(c)
        return build_context(self.deps.store, self.deps.contract_of(c), c, kind, st.src, doctor=doctor, stack=stack)


def _asks_priors(spec: ProposersSpec) -> bool:
    """Whether ``spec`` has a prior-giving proposer (``catalog`` or ``llm``): the doctor asks only then."""
    return any(e.kind in PRIOR_KINDS for e in spec.entries)


def _ask_all(askers: list["Proposer"], ctx: "PromptContext", width: int) -> list["ProposerOutcome"]:
    """Every proposer's answer to ``ctx``, in ``askers`` order, at most ``width`` requests at once (runs in one
    background thread of the runner's pool, with its own small pool for the requests)."""
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="proposer-priors") as pool:
        return list(pool.map(lambda p: p.propose(ctx), askers))


def _upside_low(ctrl: "SearchController", busy: list) -> bool:
    from infrarsi.controller.search import proposals

    return not proposals.untested_patches(ctrl, set(busy)) and proposals.config_upside(ctrl) < ctrl.gate


def _patch_name(proposer: str, digest: str, rnd: int, i: int, patches: dict, refused: dict,
                label: str | None = None) -> str:
    stem = f"{proposer}-r{rnd}-{(digest or 'nodigest')[:8]}-{i}" if label is None else \
        f"{proposer}-r{rnd}-{''.join(ch if ch.isalnum() or ch in '._-' else '_' for ch in label)[:60]}"
    name = f"{stem}.diff"
    n = 1
    while name in patches or name in refused:
        n += 1
        name = f"{stem}-{n}.diff"
    return name


# ------------------------------------------------------------------------------------------------------ priors
def merge_priors(contract: Contract, outcomes: list["ProposerOutcome"],
                 reference_peak_gib: float | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Merge the knob priors of ``outcomes`` into rows ``{"knob", "value", "mean", "spread", "mem_delta_gib",
    "proposers"}`` (one per searched knob value, sorted; means averaged, the widest spread kept, memory as a delta
    from the reference peak when that is known) and one-line reasons for priors that name no searched value."""
    from infrarsi.controller.proposers.schema import match_value

    searched = {k.name: k for k in contract.knobs if k.name not in contract.derived_knobs}
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    dropped: list[str] = []
    for o in outcomes:
        if not o.ok or o.proposal is None:
            continue
        for pr in o.proposal.priors:
            knob = searched.get(pr.knob)
            if knob is None:
                dropped.append(f"{o.proposer}: {pr.knob}={pr.value}: not a searched knob")
                continue
            value = match_value(list(knob.values), pr.value)
            if value is None or value == knob.reference:
                dropped.append(f"{o.proposer}: {pr.knob}={pr.value}: "
                               f"{'the reference value' if value is not None else 'not one of its values'}")
                continue
            a = acc.setdefault((knob.name, repr(value)), {"knob": knob.name, "value": value, "means": [],
                                                          "spreads": [], "mems": [], "proposers": []})
            a["means"].append(float(pr.mean_log_speedup))
            a["spreads"].append(float(pr.spread))
            if pr.mem_gib is not None and reference_peak_gib is not None:
                a["mems"].append(float(pr.mem_gib) - float(reference_peak_gib))
            if o.proposer not in a["proposers"]:
                a["proposers"].append(o.proposer)
    rows = []
    for key in sorted(acc):
        a = acc[key]
        rows.append({"knob": a["knob"], "value": a["value"], "mean": math.fsum(a["means"]) / len(a["means"]),
                     "spread": max(a["spreads"]),
                     "mem_delta_gib": math.fsum(a["mems"]) / len(a["mems"]) if a["mems"] else None,
                     "proposers": a["proposers"]})
    return rows, dropped


# ------------------------------------------------------------------------------------------------------ context
def build_context(store: Store, contract: Contract, c: CampaignRecord, kind: str, src: Path, *,
                  doctor: Doctor | None = None, stack: tuple[str, ...] = ()) -> "PromptContext":
    """What a proposer is shown: the contract, the editable files (of the locked commit), the phase breakdown and
    Amdahl ceiling, every ingested search trial (oldest first), every refused or rejected patch with its verdict,
    and for ``complete`` requests the verified patches to stack."""
    from infrarsi.controller.campaign.scope import expand_globs
    from infrarsi.controller.proposers.base import PromptContext, RejectedPatch, TrialSummary, VerifiedPatch

    scope = scope_of(c)
    doctor = doctor if doctor is not None else doctor_or_none(c)
    editable: dict[str, str] = {}
    for rel in expand_globs(src, contract.editable_files, "editable_files"):
        try:
            editable[rel] = (src / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    shares = dict(doctor.phase_shares) if doctor else {}
    ceiling = None
    targets = [p for p in shares if p not in ("data", "io", "dataloader")]
    if shares and targets and len(targets) < len(shares):
        from infrarsi.surrogate.amdahl import amdahl_ceiling

        try:
            ceiling = math.exp(amdahl_ceiling(shares, targets))
        except Exception:  # noqa: BLE001 - a report detail, never a failure
            ceiling = None
    t0 = doctor.t0 if doctor else None
    obs = store.observations(c.id)
    trials = []
    done = [t for t in store.list_trials(c.id, stages=["search"]) if t.status == "ingested"]
    done.sort(key=lambda t: (obs[t.id].id if t.id in obs else 0, t.seq))
    for t in done[-PROMPT_TRIALS:]:
        o = obs.get(t.id)
        step = o.step_time_s if (o and t.outcome == "ok") else None
        trials.append(TrialSummary(key=t.trial_key[:8], config=dict(t.config), patches=tuple(t.patches),
                                   step_time_s=step, speedup=(t0 / step) if (t0 and step) else None,
                                   outcome=t.outcome or t.status, verdict=o.first_failed_layer if o else None,
                                   reason=t.reason, peak_mem_gib=o.peak_mem_gib if o else None))
    diffs = scope.patches
    rejected = [RejectedPatch(name=n, verdict="intake", reason=why, diff_digest="")
                for n, why in sorted(scope.refused_patches.items())]
    seen: set[str] = set()
    verified: dict[str, float | None] = {}
    for t in done:
        o = obs.get(t.id)
        if t.outcome == "rejected" and len(t.patches) == 1 and t.patches[0] not in seen:
            name = t.patches[0]
            seen.add(name)
            rejected.append(RejectedPatch(name=name, verdict=(o.first_failed_layer if o else None) or "rejected",
                                          reason=t.reason or "", diff_digest=hashlib.sha256(
                                              diffs.get(name, "").encode()).hexdigest()))
        if t.outcome == "ok" and t.patches:
            step = o.step_time_s if o else None
            for n in t.patches:
                sp = (t0 / step) if (t0 and step) else None
                verified[n] = max(verified.get(n) or 0.0, sp or 0.0) or None
    want = list(stack) if stack else []
    vp = tuple(VerifiedPatch(name=n, diff=diffs[n], speedup=verified.get(n)) for n in want if n in diffs)
    return PromptContext(contract_yaml=c.contract_yaml, editable_files=editable, phase_breakdown=shares,
                         amdahl_ceiling=ceiling, trials=tuple(trials), rejected_patches=tuple(rejected),
                         kind=kind, verified_patches=vp)


# ------------------------------------------------------------------------------------------------------ reporting
def proposers_result(store: Store, c: CampaignRecord) -> dict[str, Any]:
    """result.json's ``proposers`` section: the ledger (per request and per proposer, with tokens, USD when priced
    and wall time), every proposed patch with its provenance and fate, and the priors frozen at doctor."""
    scope, doctor = scope_or_none(c) or Scope(commit=""), doctor_or_none(c)
    import dataclasses

    requests: list[dict[str, Any]] = []
    for r in store.proposer_requests(c.id):
        d = dataclasses.asdict(r)
        requests.append({k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in d.items()})
    by: dict[str, dict[str, Any]] = {}
    for r in requests:
        name = r.get("proposer") or "?"
        b = by.setdefault(name, {"proposer": name, "kind": r.get("kind"), "model": r.get("model"), "requests": 0,
                                 "ok": 0, "failed": 0, "tokens_in": 0, "tokens_out": 0, "usd": None,
                                 "wall_s": 0.0})
        b["requests"] += 1
        b["ok" if r.get("outcome") == "ok" else "failed"] += 1
        b["tokens_in"] += int(r.get("tokens_in") or 0)
        b["tokens_out"] += int(r.get("tokens_out") or 0)
        if r.get("usd") is not None:
            b["usd"] = (b["usd"] or 0.0) + float(r["usd"])
        b["wall_s"] += float(r.get("wall_s") or 0.0)
    provenance = scope.patch_provenance
    refused = scope.refused_patches
    fate: dict[str, dict[str, Any]] = {}
    for t in store.list_trials(c.id, stages=["search"]):
        for n in t.patches:
            f = fate.setdefault(n, {"trials": 0, "ok": 0, "rejected": 0, "other": 0, "layers": []})
            f["trials"] += 1
            key = t.outcome if t.outcome in ("ok", "rejected") else "other"
            f[key] += 1
    obs = store.observations(c.id)
    for t in store.list_trials(c.id, stages=["search"]):
        if t.outcome == "rejected" and t.id in obs and obs[t.id].first_failed_layer:
            for n in t.patches:
                if obs[t.id].first_failed_layer not in fate[n]["layers"]:
                    fate[n]["layers"].append(obs[t.id].first_failed_layer)
    promotion = result_of(c).promotion or {}
    promoted = set(promotion.get("candidate", {}) and promotion["candidate"].get("patches") or [])
    patches = []
    for name in sorted(set(scope.patches) | set(provenance)):
        p = provenance.get(name) or {"proposer": "folder", "kind": "folder"}
        f = fate.get(name, {})
        if name in refused:
            status = "refused at intake"
        elif name in promoted:
            status = "promoted"
        elif f.get("rejected") and not f.get("ok"):
            status = f"rejected by the verifier ({', '.join(f.get('layers') or []) or 'rejected'})"
        elif f.get("ok"):
            status = "verified"
        elif f.get("trials"):
            status = "failed"
        else:
            status = "not tried"
        patches.append({"name": name, "proposer": p.get("proposer"), "kind": p.get("kind"),
                        "model": p.get("model"), "prompt_digest": p.get("prompt_digest"),
                        "rationale": p.get("rationale"), "claimed_gain": p.get("claimed_gain"),
                        "prior_mean": p.get("prior_mean"), "status": status,
                        "reason": refused.get(name), "trials": f.get("trials", 0)})
    totals = {"requests": len(requests), "tokens_in": sum(b["tokens_in"] for b in by.values()),
              "tokens_out": sum(b["tokens_out"] for b in by.values()),
              "usd": (math.fsum(b["usd"] for b in by.values() if b["usd"] is not None)
                      if any(b["usd"] is not None for b in by.values()) else None),
              "wall_s": math.fsum(b["wall_s"] for b in by.values())}
    return {"by_proposer": list(by.values()), "totals": totals, "requests": requests, "patches": patches,
            "rounds": scope.proposal_rounds, "priors": (doctor.proposer_priors if doctor else None) or [],
            "priors_dropped": (doctor.proposer_priors_dropped if doctor else None) or []}
