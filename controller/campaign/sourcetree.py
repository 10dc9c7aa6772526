"""A trial's own source tree: the locked commit of the target repo with the candidate's patches and config edits.

Kept apart from :mod:`infrarsi.controller.campaign.trialspec` (which builds the launch) because it is the one
place the controller writes trial code, and the one place it touches the user's repository per trial.

The tree is an *export*, not a worktree: ``src/`` holds the files of the locked commit and nothing else (no
``.git`` file or directory), so code running in it has no path back into the user's ``.git`` (hooks, config).
The export reads the user's object database through a private, empty git directory (``objects/info/alternates``
-> the user's objects; no config, no hooks, no info/attributes of the user's repository): ``git read-tree`` +
``git checkout-index`` there, with the hardened flags of :func:`infrarsi.controller.campaign.scope.git`.
``read-tree`` refuses tree entries named ``.git`` or ``..``, so not even a crafted commit can plant one.
A committed ``.gitattributes`` may name a filter driver, but the private directory defines none (and
:func:`scope.git` blanks any from the global config), so no command runs; Git LFS files arrive as pointers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infrarsi.controller.campaign.scope import git
from infrarsi.controller.contract.launch import apply_config_edits
from infrarsi.controller.errors import ScopeError


def _resolve_commit(repo: Path, commit: str) -> str:
    """The full hash of ``commit`` in ``repo`` (ScopeError naming it when it is not a commit there)."""
    if not commit or commit.startswith("-"):
        raise ScopeError(f"commit {commit!r} is not a commit name")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").strip()
    except ScopeError:
        raise ScopeError(f"commit {commit} is not in {repo}: was the locked commit removed (rebase, gc)?") from None


@contextmanager
def private_git(repo: Path, tmp: Path) -> Iterator[dict[str, str]]:
    """Yield ``{GIT_DIR, GIT_INDEX_FILE}`` of a fresh, empty bare git directory under ``tmp`` that reads
    ``repo``'s objects through ``objects/info/alternates`` (read-only use: nothing is ever written to ``repo``).

    Nothing of ``repo``'s ``.git`` other than its object database is read: not its config (drivers,
    fsmonitor, ``core.worktree``), not its hooks, not ``info/attributes``.
    """
    common = Path(repo) / git(repo, "rev-parse", "--git-common-dir").strip()  # relative to repo, or absolute
    fmt = git(repo, "rev-parse", "--show-object-format", check=False).strip()  # old git echoes the flag
    gdir = tmp / "git"
    git(tmp, "init", "-q", "--bare", "--template=", *([f"--object-format={fmt}"] if fmt == "sha256" else []), str(gdir))
    info = gdir / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(str((common / "objects").resolve()) + "\n")
    yield {"GIT_DIR": str(gdir), "GIT_INDEX_FILE": str(tmp / "index")}


def export_commit(repo: Path, commit: str, dest: Path, env: dict[str, str]) -> None:
    """Write the files of ``commit`` into the new directory ``dest`` with the private git ``env`` of
    :func:`private_git` (its index then describes ``dest``).  ScopeError naming the commit on failure."""
    full = _resolve_commit(repo, commit)
    dest.mkdir(parents=True)
    env = {**env, "GIT_WORK_TREE": str(dest)}
    git(dest, "read-tree", full, env=env)
    git(dest, "checkout-index", "--all", "--force", env=env)
    if os.path.lexists(dest / ".git"):  # read-tree refuses '.git' entries; kept as a tripwire
        raise ScopeError(f"export of {full[:10]} produced {dest / '.git'}: refusing a tree with a .git entry")


def prepare_source(repo: Path, commit: str, src: Path, patches: list[tuple[str, str]],
                   config_edits: dict[str, dict[str, Any]], prefix: str = "",
                   inputs: list[dict[str, Any]] | None = None) -> Path:
    """Create ``src`` as an export of ``commit`` (no ``.git``) and apply ``patches`` then ``config_edits``.

    ``inputs``: the scope's locked read-only inputs (:mod:`infrarsi.controller.campaign.inputs`): each is re-checked
    against its manifest first (InputChanged, a ScopeError naming the file, when one changed since ``init``) and
    gets an empty mount point in the tree, which the exec wrapper binds the input over read-only.

    ``prefix`` is the target repo's path inside its git work tree (a project in a monorepo); patches and
    config paths are relative to it.  Returns the job's working directory (``src/prefix``).  Idempotent: an
    existing ``src`` from an interrupted attempt is removed first.  PatchError names a patch that does not
    apply, or a config file that would be written outside the target repo (a symlink); ScopeError when the
    commit cannot be read.  Nothing is written into ``repo``.
    """
    repo, src = Path(repo), Path(src)
    if inputs:
        from infrarsi.controller.campaign.inputs import check_inputs

        check_inputs(inputs)
    if os.path.lexists(src):
        remove_source(repo, src)
    src.parent.mkdir(parents=True, exist_ok=True)
    from infrarsi.controller.patches.intake import apply_patches

    with tempfile.TemporaryDirectory(prefix=".infrarsi-export-", dir=src.parent) as tmp:
        with private_git(repo, Path(tmp)) as env:
            export_commit(repo, commit, src, env)
    workdir = src / prefix if prefix else src
    if not workdir.is_dir():
        raise ScopeError(f"{prefix} is not a directory in commit {commit[:10]} of {repo}")
    if patches:  # paths relative to the target repo (a monorepo prefix is the working directory)
        apply_patches(workdir, patches)
    if config_edits:
        apply_config_edits(workdir, config_edits)
    if inputs:
        from infrarsi.controller.campaign.inputs import make_mount_points

        make_mount_points(src, workdir, inputs)
    return workdir


def _force_rmtree(path: Path) -> None:
    """Remove ``path`` even when the job left directories without write/search permission; never follows
    a symlink out of the tree; never raises."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    shutil.rmtree(path, ignore_errors=True)
    if not path.exists():
        return
    for dirpath, dirnames, _ in os.walk(path, followlinks=False):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


def remove_source(repo: Path | None, src: Path) -> None:
    """Remove a trial's source tree; never raises for a missing tree and does not need ``repo``.

    A tree made by an older version was a ``git worktree`` of ``repo`` (``src/.git`` is a file): when ``repo``
    is given its registration is pruned too (``git worktree prune``, hardened).
    """
    src = Path(src)
    legacy = (src / ".git").is_file() and not (src / ".git").is_symlink()
    if os.path.lexists(src):
        _force_rmtree(src)
    if legacy and repo is not None and Path(repo).is_dir():
        git(Path(repo), "worktree", "prune", check=False)


@contextmanager
def scratch_tree(repo: Path, commit: str, prefix: str = "") -> Iterator[tuple[Path, dict[str, str]]]:
    """Yield ``(workdir, env)``: a throw-away export of ``commit`` (``workdir`` = ``src/prefix``) and the private
    git environment whose index matches the export, for diffs (``git(src, ..., env=env)``).  Removed on exit."""
    with tempfile.TemporaryDirectory(prefix="infrarsi-scratch-") as tmp:
        with private_git(Path(repo), Path(tmp)) as env:
            src = Path(tmp) / "src"
            export_commit(Path(repo), commit, src, env)
            yield (src / prefix if prefix else src), {**env, "GIT_WORK_TREE": str(src)}


__all__ = ["export_commit", "prepare_source", "private_git", "remove_source", "scratch_tree"]
