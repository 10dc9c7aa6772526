"""The ``folder`` proposer: the contract's patch folder (today's behaviour), as a proposer.

Every ``*.diff``/``*.patch`` file of the folder (``patches.intake.load_patch_dir``) becomes a
:class:`~infrarsi.controller.proposers.schema.PatchProposal` named after its file (``fused_adamw.patch``, as before), with claimed gain 0 and the
first line of a leading comment block (if any) as rationale.  Each goes through the same ``check_patch`` rules as
any proposed patch; refused files are listed in ``dropped``.  A folder that is missing is a failed outcome; an
empty folder is an ok outcome with no patches (nothing was wrong).
"""

from __future__ import annotations

import time
from pathlib import Path

from infrarsi.controller.errors import PatchError, one_line
from infrarsi.controller.proposers.base import PatchRules, PromptContext, Proposer, ProposerOutcome, validate_patches
from infrarsi.controller.proposers.schema import MAX_RATIONALE_CHARS, PatchProposal, Proposal
from infrarsi.controller.proposers.spec import FolderSpec


def _rationale(text: str) -> str:
    """The first non-empty line before the first ``diff``/``---`` header, cut to the rationale limit."""
    for line in text.split("\n"):
        if line.startswith(("diff --git", "--- ", "Index: ")):
            break
        s = line.strip().lstrip("#").strip()
        if s:
            s = "".join(ch if ch.isprintable() else "?" for ch in s)
            return s[:MAX_RATIONALE_CHARS]
    return ""


class FolderProposer(Proposer):
    """Patches read from a folder (``spec.dir``, else the contract's ``patches.dir``), relative to the repo."""

    kind = "folder"

    def __init__(self, spec: FolderSpec, *, contract: object, rules: PatchRules) -> None:
        self.spec = spec
        self.name = spec.name
        self.rules = rules
        patches = getattr(contract, "patches", None)
        self.dir: str | None = spec.dir if spec.dir is not None else getattr(patches, "dir", None)

    def propose(self, ctx: PromptContext) -> ProposerOutcome:
        """The folder's patches (validated); a missing folder is ok=False with the reason."""
        t0 = time.monotonic()
        if not self.dir:
            return ProposerOutcome(proposer=self.name, kind=self.kind, model=self.model, ok=True,
                                   reason="no patch folder configured", proposal=Proposal(), prompt_digest="",
                                   wall_s=time.monotonic() - t0)
        from infrarsi.controller.patches.intake import load_patch_dir

        directory = Path(self.rules.repo) / self.dir
        try:
            files = load_patch_dir(directory)
        except (PatchError, OSError) as exc:
            return self.failed(exc, wall_s=time.monotonic() - t0)
        candidates: list[PatchProposal] = []
        dropped: list[tuple[str, str]] = []
        for fname, text in files:
            try:
                candidates.append(PatchProposal(diff=text, rationale=_rationale(text), claimed_gain=0.0,
                                                name=_safe_name(fname)))
            except ValueError as exc:
                dropped.append((fname, one_line(exc)))
        good, bad = validate_patches(candidates, self.rules, self.name)
        dropped += bad
        reason = f"{len(dropped)} of {len(files)} patch files refused; first: {dropped[0][1]}" if dropped else ""
        return ProposerOutcome(proposer=self.name, kind=self.kind, model=self.model, ok=True, reason=one_line(reason),
                               proposal=Proposal(patches=good), prompt_digest="", wall_s=time.monotonic() - t0,
                               dropped=tuple(dropped))


def _safe_name(stem: str) -> str:
    """A patch name from a file name (kept as the patch folder names it): characters outside ``[A-Za-z0-9_.+-]`` become ``_``."""
    out = "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "_.+-")) else "_" for ch in stem)
    return out[:100] or "patch"
