"""The ``init`` stage: lock the scope of a campaign.

The scope lock records the commit every trial checks out, the SHA-256 of every frozen file, the list of
editable files, the contract digest and the patches that passed intake (with the refused ones and why).
``apply`` later refuses to write when any locked file changed since.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import PatchError, ScopeError
from infrarsi.controller.store.stage_records import Scope, as_scope


#: ``-c`` settings on every git command the controller runs on user data: no hooks, no fsmonitor command, no
#: transport (so no ssh/askpass/credential/proxy command), no external diff, no signing program, no submodule
#: recursion.  Filter/diff/merge *drivers* named in the repository's config are blanked per call (see
#: :func:`driver_overrides`): a committed ``.gitattributes`` can then name a driver, but no command runs.
SAFE_CONFIG: tuple[str, ...] = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.sshCommand=false", "core.askPass=",
    "core.gitProxy=", "credential.helper=", "protocol.allow=never", "diff.external=", "commit.gpgSign=false",
    "tag.gpgSign=false", "gpg.program=false", "submodule.recurse=false", "core.pager=cat",
    "uploadpack.packObjectsHook=",
)
#: Per-driver keys that name a command (``filter.<d>.clean`` ...); each found in the config is set to "".
_DRIVER_KEY = re.compile(r"^(filter|diff|merge)\.(.+)\.(clean|smudge|process|command|textconv|driver)$")
#: Environment variables kept from the caller (identity); every other ``GIT_*`` variable is dropped.
_KEEP_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
             "GIT_COMMITTER_DATE")


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a hardened git command: the caller's, minus every ``GIT_*`` variable except identity
    ones (no ``GIT_DIR``/``GIT_EXTERNAL_DIFF``/``GIT_SSH_COMMAND``/``GIT_CONFIG_PARAMETERS`` leak in), with the
    system config ignored, no terminal prompt, no pager; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEEP_ENV}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", GIT_ATTR_NOSYSTEM="1",
               GIT_PROTOCOL_FROM_USER="0")
    env.update(extra or {})
    return env


def safe_flags() -> list[str]:
    """``["-c", k=v, ...]`` for :data:`SAFE_CONFIG`."""
    return [arg for kv in SAFE_CONFIG for arg in ("-c", kv)]


def driver_overrides(repo: Path, env: dict[str, str] | None = None) -> list[str]:
    """``-c <key>=`` for every filter/diff/merge driver command defined in the config git reads in ``repo``
    (local, global, included files): such a command would run on checkout, add, archive or diff."""
    proc = subprocess.run(["git", *safe_flags(), "-C", str(repo), "config", "--null", "--get-regexp",
                           r"^(filter|diff|merge)\."], capture_output=True, env=env or git_env())
    out: list[str] = []
    for entry in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        key = entry.split("\n", 1)[0]
        m = _DRIVER_KEY.match(key)
        if m:
            out += ["-c", f"{key}="]
            if m.group(1) == "filter":
                out += ["-c", f"filter.{m.group(2)}.required=false"]
    return out


def git(repo: Path, *args: str, check: bool = True, stdin: str | None = None,
        env: dict[str, str] | None = None) -> str:
    """Run a hardened ``git -C repo args`` and return stdout; ScopeError with git's first error line on failure.

    Every git command the controller runs on user data goes through here: :data:`SAFE_CONFIG` plus
    :func:`driver_overrides`, and the environment of :func:`git_env` (``env`` adds to it).  So neither a hook,
    nor ``core.fsmonitor``, nor a filter/diff/merge driver from ``.git/config`` + ``.gitattributes``, nor a
    transport can run a command.
    """
    full_env = git_env(env)
    argv = ["git", *safe_flags(), *driver_overrides(repo, full_env), "-C", str(repo), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, input=stdin, env=full_env)
    if check and proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        raise ScopeError(f"git {' '.join(args[:2])} in {repo}: {msg}")
    return proc.stdout


def expand_globs(repo: Path, patterns: list[str], what: str = "files") -> list[str]:
    """Repo-relative POSIX paths of the files matching ``patterns`` (sorted, files only).

    Symlinks are resolved: a match that is, or lies under, a symlink pointing out of ``repo`` raises ScopeError
    naming the pattern (``what`` is the contract field, e.g. ``frozen_files``), the file and where it points; so
    does a pattern that is absolute or contains ``..``.  Links that stay inside the repo are kept.
    """
    out: set[str] = set()
    root = repo.resolve()
    for pat in patterns:
        pp = Path(pat)
        if pp.is_absolute() or ".." in pp.parts:
            raise ScopeError(f"{what}: pattern '{pat}' leaves the repository {repo}")
        for p in repo.glob(pat):
            target = p.resolve()
            if not target.is_relative_to(root):
                raise ScopeError(f"{what}: '{p.relative_to(repo).as_posix()}' (matched by '{pat}') points to "
                                 f"{target}, outside the repository {root}")
            if p.is_file():
                out.add(p.relative_to(repo).as_posix())
    return sorted(out)


def check_config_files(repo: Path, contract: Contract) -> None:
    """ScopeError when a config knob's file (``apply: {config: {file}}``) is, or lies under, a symlink that
    points out of ``repo``: trials and ``infrarsi apply`` write that file, and must never write outside."""
    from infrarsi.controller.contract.model import ConfigApply

    root = repo.resolve()
    for knob in contract.knobs:
        app = knob.applier()
        if not isinstance(app, ConfigApply):
            continue
        target = (repo / app.file).resolve()
        inside = target.is_relative_to(root) and ".git" not in target.relative_to(root).parts
        if not inside:
            raise ScopeError(f"knob {knob.name}: config file '{app.file}' points to {target}, outside the "
                             f"repository {root}")


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def frozen_manifest(repo: Path, contract: Contract) -> dict[str, str]:
    """``{relpath: sha256}`` for every frozen file."""
    return {rel: sha256_file(repo / rel) for rel in expand_globs(repo, contract.frozen_files, "frozen_files")}


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
    check_config_files(repo, contract)
    frozen = frozen_manifest(repo, contract)
    dirty = [line[3:] for line in git(repo, "status", "--porcelain", "--", *frozen).splitlines()] if frozen else []
    if dirty:
        raise ScopeError(f"frozen file {dirty[0]} has uncommitted changes: commit or revert it before init")
    prefix = git(repo, "rev-parse", "--show-prefix").strip()
    editable = expand_globs(repo, contract.editable_files, "editable_files")
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


def changed_since_lock(repo: Path, scope: Scope | dict[str, Any]) -> list[str]:
    """Locked files (frozen and editable) whose content differs from the lock; empty when none changed."""
    scope = as_scope(scope)
    changed = []
    for rel, digest in {**scope.frozen, **scope.editable_digests}.items():
        p = repo / rel
        if not p.is_file() or sha256_file(p) != digest:
            changed.append(rel)
    return sorted(changed)
