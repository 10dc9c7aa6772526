"""A trial's own source tree: the locked commit of the target repo with the candidate's patches and config edits.

Kept apart from :mod:`infrarsi.controller.campaign.trialspec` (which builds the launch) because it is the one
place the controller writes trial code, and the one place it touches the user's repository per trial.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from infrarsi.controller.campaign.scope import git
from infrarsi.controller.contract.launch import apply_config_edits


def prepare_source(repo: Path, commit: str, src: Path, patches: list[tuple[str, str]],
                   config_edits: dict[str, dict[str, Any]], prefix: str = "") -> Path:
    """Create ``src`` as a detached worktree of ``commit`` and apply ``patches`` then ``config_edits``.

    ``prefix`` is the target repo's path inside its git work tree (a project in a monorepo); patches and
    config paths are relative to it.  Returns the job's working directory (``src/prefix``).  Idempotent: an
    existing ``src`` from an interrupted attempt is removed first.  PatchError names a patch that does not apply.
    """
    if src.exists():
        remove_source(repo, src)
    src.parent.mkdir(parents=True, exist_ok=True)
    from infrarsi.controller.patches.intake import apply_patches

    git(repo, "worktree", "add", "--detach", "--force", str(src), commit)
    workdir = src / prefix if prefix else src
    if patches:  # paths relative to the target repo (a monorepo prefix is the working directory)
        apply_patches(workdir, patches)
    if config_edits:
        apply_config_edits(workdir, config_edits)
    return workdir


def remove_source(repo: Path, src: Path) -> None:
    """Remove a trial worktree (and its registration in ``repo``); never raises for a missing tree."""
    git(repo, "worktree", "remove", "--force", str(src), check=False)
    if src.exists():
        shutil.rmtree(src, ignore_errors=True)
    git(repo, "worktree", "prune", check=False)
