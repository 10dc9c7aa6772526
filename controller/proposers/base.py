"""The proposer interface: what a proposer is shown (:class:`PromptContext`), what one request yields
(:class:`ProposerOutcome`, one ledger row), the :class:`Proposer` base class and :func:`build_proposers`.

Contract of :meth:`Proposer.propose`: it never raises for bad output or a failing endpoint/agent.  Every failure
(non-JSON, schema mismatch, a diff that does not apply or touches a frozen file, a timeout, HTTP 429/5xx after
retries, an unreachable endpoint, an agent exiting non-zero, a spent budget) is an outcome with ``ok=False`` and a
one-line ``reason``.  Patches in a successful outcome have passed :func:`validate_patches` (the same
``patches.intake.check_patch`` rules as the patch folder); invalid ones are dropped and listed in ``dropped``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping

from infrarsi.controller.errors import PatchError, one_line
from infrarsi.controller.proposers.schema import KnobPrior, PatchProposal, Proposal, match_value

if TYPE_CHECKING:
    from infrarsi.controller.contract.model import Contract
    from infrarsi.controller.proposers.spec import ProposersSpec

RequestKind = Literal["priors", "patches", "complete"]
REQUEST_KINDS: tuple[str, ...] = ("priors", "patches", "complete")


@dataclass(frozen=True)
class TrialSummary:
    """One finished trial as the prompt shows it (frozen; built by the caller from the store's records).

    ``key``: a short trial id; ``config``: knob -> value; ``patches``: patch names applied; ``step_time_s``:
    median step time on the wrapper's clock (None when it did not finish); ``speedup``: over the reference;
    ``outcome``: ``ok``/``rejected``/``oom``/``failed``/...; ``verdict``: the first failing verifier layer or
    predicate (None when accepted); ``reason``: one line; ``peak_mem_gib``: when known.
    """

    key: str
    config: Mapping[str, Any]
    patches: tuple[str, ...]
    step_time_s: float | None
    speedup: float | None
    outcome: str
    verdict: str | None = None
    reason: str | None = None
    peak_mem_gib: float | None = None


@dataclass(frozen=True)
class RejectedPatch:
    """A patch refused at intake or rejected by the verifier: the prompt lists every one so no cheat is repeated."""

    name: str
    verdict: str
    reason: str
    diff_digest: str


@dataclass(frozen=True)
class VerifiedPatch:
    """A patch that passed verification (shown in full for ``complete`` requests: stack these)."""

    name: str
    diff: str
    speedup: float | None = None


@dataclass(frozen=True)
class PromptContext:
    """Everything a proposer may be shown.  ``trials`` are in ingestion order (oldest first).

    ``editable_files``: repo-relative path -> text of every editable file; ``phase_breakdown``: phase -> share of
    step time (forward, backward, optimizer, data, collectives, ...); ``amdahl_ceiling``: the largest speedup the
    breakdown allows for what patches can reach (None when unknown).  ``kind`` says what is asked for.
    """

    contract_yaml: str
    editable_files: Mapping[str, str]
    phase_breakdown: Mapping[str, float]
    amdahl_ceiling: float | None
    trials: tuple[TrialSummary, ...] = ()
    rejected_patches: tuple[RejectedPatch, ...] = ()
    kind: RequestKind = "patches"
    verified_patches: tuple[VerifiedPatch, ...] = ()


@dataclass(frozen=True)
class ProposerOutcome:
    """One request to one proposer: a ledger row plus the validated proposal.

    ``ok`` is True when ``proposal`` holds at least one usable prior or patch (or, for ``folder``/``catalog``,
    whatever they have).  ``reason`` is one line (empty when ok and nothing was dropped).  ``dropped``: (patch
    label, one-line reason) for each patch refused by validation.  ``usd`` is None when no price is configured.
    """

    proposer: str
    kind: str
    model: str
    ok: bool
    reason: str
    proposal: Proposal | None
    prompt_digest: str
    tokens_in: int = 0
    tokens_out: int = 0
    usd: float | None = None
    wall_s: float = 0.0
    dropped: tuple[tuple[str, str], ...] = ()

    @property
    def outcome(self) -> str:
        """``ok`` or ``failed`` (the ledger's outcome column)."""
        return "ok" if self.ok else "failed"


def prompt_digest(prompt: str) -> str:
    """SHA-256 hex digest of a prompt (recorded with every request and every patch it produced)."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class PatchRules:
    """What a proposed patch must satisfy: the repo it applies to and the contract's globs and line limit."""

    repo: Path
    editable: tuple[str, ...]
    frozen: tuple[str, ...]
    max_changed_lines: int

    @classmethod
    def from_contract(cls, contract: "Contract", repo: Path) -> "PatchRules":
        """The rules of ``contract`` for the repository at ``repo``."""
        return cls(repo=Path(repo), editable=tuple(contract.editable_files), frozen=tuple(contract.frozen_files),
                   max_changed_lines=contract.patches.max_changed_lines)


def validate_patches(patches: list[PatchProposal], rules: PatchRules, label: str
                     ) -> tuple[list[PatchProposal], list[tuple[str, str]]]:
    """Split ``patches`` into those that pass ``patches.intake.check_patch`` under ``rules`` and (label, reason)
    for those that do not (a repeated diff is refused too).  ``label`` names the proposer in messages; a patch
    without a name is ``label-N``."""
    from infrarsi.controller.patches.intake import check_patch

    good: list[PatchProposal] = []
    bad: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for i, p in enumerate(patches, 1):
        name = p.name or f"{label}-{i}"
        if p.diff in seen:
            bad.append((name, f"patch {name}: the same diff as {seen[p.diff]}"))
            continue
        seen[p.diff] = name
        try:
            check_patch(rules.repo, p.diff, list(rules.editable), list(rules.frozen), rules.max_changed_lines,
                        name=name)
        except PatchError as exc:
            bad.append((name, one_line(exc)))
            continue
        good.append(p)
    return good, bad


def validate_priors(priors: list[KnobPrior], knobs: list[Any]) -> tuple[list[KnobPrior], list[tuple[str, str]]]:
    """Split ``priors`` into those naming a contract knob and one of its values (``schema.match_value``) and
    (label, reason) for the rest.  With no ``knobs`` known every prior passes."""
    if not knobs:
        return list(priors), []
    by_name = {k.name: k for k in knobs}
    good: list[KnobPrior] = []
    bad: list[tuple[str, str]] = []
    for p in priors:
        label = f"prior {p.knob}={p.value}"
        knob = by_name.get(p.knob)
        if knob is None:
            bad.append((label, f"unknown knob '{p.knob}'"))
        elif match_value(list(knob.values), p.value) is None:
            bad.append((label, f"'{p.value}' is not a value of knob '{p.knob}'"))
        else:
            good.append(p)
    return good, bad


def finish(proposer: "Proposer", proposal: Proposal, *, rules: PatchRules, knobs: list[Any], digest: str,
           **extra: Any) -> ProposerOutcome:
    """Validate a parsed ``proposal`` (priors against ``knobs``, patches against ``rules``) into an outcome:
    ok when anything usable is left, else ok=False naming the first reason."""
    priors, bad_priors = validate_priors(list(proposal.priors), knobs)
    patches, bad_patches = validate_patches(list(proposal.patches), rules, proposer.name)
    dropped = tuple(bad_priors + bad_patches)
    kept = Proposal(priors=priors, patches=patches)
    if proposal.empty:
        return proposer.failed("answer holds no priors and no patches", digest, **extra)
    if kept.empty:
        n = len(proposal.priors) + len(proposal.patches)
        return proposer.failed(f"all {n} proposed items refused; first: {dropped[0][1]}", digest,
                               dropped=dropped, **extra)
    reason = f"{len(dropped)} proposed items refused; first: {dropped[0][1]}" if dropped else ""
    return ProposerOutcome(proposer=proposer.name, kind=proposer.kind, model=proposer.model, ok=True,
                           reason=one_line(reason), proposal=kept, prompt_digest=digest, dropped=dropped, **extra)


class Proposer(ABC):
    """A source of priors and/or patches.  Subclasses set ``name`` and ``kind`` and implement :meth:`propose`."""

    name: str
    kind: str
    #: model name recorded in the ledger (``-`` for folder/catalog, the command's program for agents)
    model: str = "-"
    #: requests this proposer may have in flight at once
    max_concurrent: int = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Guard every concrete ``propose``: an exception escaping it (a bug, an unexpected OS error) becomes a
        failed outcome ``internal error in proposer: Type: message`` instead of reaching the campaign."""
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("propose")
        if fn is None or getattr(fn, "__isabstractmethod__", False) or getattr(fn, "_guarded", False):
            return

        @functools.wraps(fn)
        def guarded(self: "Proposer", ctx: PromptContext) -> ProposerOutcome:
            t0 = time.monotonic()
            try:
                return fn(self, ctx)
            except Exception as exc:  # noqa: BLE001 - the contract: never raise
                return self.failed(f"internal error in proposer: {type(exc).__name__}: {one_line(exc, 300)}",
                                   wall_s=time.monotonic() - t0)

        guarded._guarded = True  # type: ignore[attr-defined]
        cls.propose = guarded  # type: ignore[method-assign]

    @abstractmethod
    def propose(self, ctx: PromptContext) -> ProposerOutcome:
        """Answer one request.  Never raises for bad output or a failing backend (ok=False, one-line reason)."""

    def seed_spent(self, tokens: int, usd: float) -> None:
        """Tell the proposer what earlier requests of this campaign already spent (from the ledger), so its
        budget holds across restarts.  No-op for proposers without a budget."""

    def failed(self, reason: object, digest: str = "", **extra: Any) -> ProposerOutcome:
        """A failed outcome with ``reason`` cut to one line."""
        return ProposerOutcome(proposer=self.name, kind=self.kind, model=self.model, ok=False,
                               reason=one_line(reason), proposal=None, prompt_digest=digest, **extra)


def build_proposers(spec: "ProposersSpec", *, contract: "Contract", repo: Path, workdir: Path,
                    isolation: str = "bwrap", environ: Mapping[str, str] | None = None) -> list[Proposer]:
    """One :class:`Proposer` per entry of ``spec``, in order.

    ``repo``: the locked source tree patches apply to (its editable files are what agents edit a copy of);
    ``workdir``: a folder for scratch copies and prompt files; ``isolation``: ``bwrap`` or ``none`` (the trials'
    setting, :mod:`infrarsi.verifier.sandbox`); ``environ``: where API keys are read at call time (default
    ``os.environ``).  Contract-relative paths (a folder's ``dir``) resolve against ``repo``.
    """
    from infrarsi.controller.proposers.agent import AgentProposer
    from infrarsi.controller.proposers.catalog import CatalogProposer
    from infrarsi.controller.proposers.folder import FolderProposer
    from infrarsi.controller.proposers.llm import LlmProposer

    rules = PatchRules.from_contract(contract, repo)
    out: list[Proposer] = []
    for e in spec.entries:
        if e.kind == "folder":
            out.append(FolderProposer(e, contract=contract, rules=rules))
        elif e.kind == "catalog":
            out.append(CatalogProposer(e, contract=contract))
        elif e.kind == "llm":
            out.append(LlmProposer(e, rules=rules, knobs=list(contract.knobs), prompt_chars=spec.prompt_chars,
                                   environ=environ))
        elif e.kind == "agent":
            out.append(AgentProposer(e, rules=rules, knobs=list(contract.knobs), workdir=Path(workdir),
                                     prompt_chars=spec.prompt_chars, isolation=isolation, environ=environ))
        else:  # pragma: no cover - the union is closed
            raise ValueError(f"unknown proposer kind '{e.kind}'")
    return out
