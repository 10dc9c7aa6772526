"""The ``init`` stage: lock the scope of a campaign.

The scope lock records the commit every trial checks out, the SHA-256 of every frozen file, the list of
editable files, the contract digest and the patches that passed intake (with the refused ones and why).
``apply`` later refuses to write when any locked file changed since.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import PatchError, ScopeError


def git(repo: Path, *args: str, check: bool = True, stdin: str | None = None) -> str:
    """Run ``git -C repo args`` and return stdout; ScopeError with git's first error line on failure."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        raise ScopeError(f"git {' '.join(args[:2])} in {repo}: {msg}")
    return proc.stdout


def expand_globs(repo: Path, patterns: list[str]) -> list[str]:
    """Repo-relative POSIX paths of the files matching ``patterns`` (sorted, files only, inside the repo)."""
    out: set[str] = set()
    root = repo.resolve()
    for pat in patterns:
        for p in repo.glob(pat):
            if p.is_file() and p.resolve().is_relative_to(root):
                out.add(p.relative_to(repo).as_posix())
    return sorted(out)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def frozen_manifest(repo: Path, contract: Contract) -> dict[str, str]:
    """``{relpath: sha256}`` for every frozen file."""
    return {rel: sha256_file(repo / rel) for rel in expand_globs(repo, contract.frozen_files)}


def lock_scope(repo: Path, contract: Contract, contract_digest: str) -> dict[str, Any]:
    """Compute the scope lock for ``repo``.

    Raises ScopeError when ``repo`` is not a git work tree, has no commit, or a frozen file has uncommitted
    changes (trials check out the commit, so a dirty frozen file would silently differ from what runs).
    """
    if not (repo / ".git").exists() and git(repo, "rev-parse", "--is-inside-work-tree", check=False).strip() != "true":
        raise ScopeError(f"{repo} is not a git repository: run 'git init && git add -A && git commit' first")
    commit = git(repo, "rev-parse", "HEAD", check=False).strip()
    if not commit:
        raise ScopeError(f"{repo} has no commit yet: commit the training code first")
    frozen = frozen_manifest(repo, contract)
    dirty = [line[3:] for line in git(repo, "status", "--porcelain", "--", *frozen).splitlines()] if frozen else []
    if dirty:
        raise ScopeError(f"frozen file {dirty[0]} has uncommitted changes: commit or revert it before init")
    prefix = git(repo, "rev-parse", "--show-prefix").strip()
    editable = expand_globs(repo, contract.editable_files)
    editable_digests = {rel: sha256_file(repo / rel) for rel in editable}
    patches, refused = intake_patches(repo, contract, editable, list(frozen))
    return {
        "commit": commit,
        "prefix": prefix,
        "contract_digest": contract_digest,
        "frozen": frozen,
        "editable": editable,
        "editable_digests": editable_digests,
        "patches": patches,
        "refused_patches": refused,
    }


def intake_patches(repo: Path, contract: Contract, editable: list[str],
                   frozen: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Run every patch in ``contract.patches.dir`` through intake.

    Returns ``(accepted {name: diff text}, refused {name: one-line reason})``."""
    if not contract.patches.dir:
        return {}, {}
    from infrarsi.controller.patches.intake import check_patch, load_patch_dir

    pdir = repo / contract.patches.dir
    if not pdir.is_dir():
        raise ScopeError(f"patches.dir: {pdir} is not a directory")
    accepted: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name, text in load_patch_dir(pdir):
        try:
            check_patch(repo, text, contract.editable_files, contract.frozen_files, contract.patches.max_changed_lines,
                        name=name)
        except PatchError as exc:
            refused[name] = str(exc)
            continue
        accepted[name] = text
    return accepted, refused


def changed_since_lock(repo: Path, scope: dict[str, Any]) -> list[str]:
    """Locked files (frozen and editable) whose content differs from the lock; empty when none changed."""
    changed = []
    for rel, digest in {**scope.get("frozen", {}), **scope.get("editable_digests", {})}.items():
        p = repo / rel
        if not p.is_file() or sha256_file(p) != digest:
            changed.append(rel)
    return sorted(changed)
