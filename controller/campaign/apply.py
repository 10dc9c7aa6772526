"""The ``apply`` stage: write the promoted configuration and source diffs into the target repo.

Refuses (one line, naming the file) when any file locked at ``init`` changed since, when a patch no longer
applies, or when the requested branch already exists.  With a branch, the change is committed there, so
``git diff <base>..<branch>`` is exactly the promoted diff plus ``infrarsi.promoted.yaml``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from infrarsi.controller.campaign.scope import changed_since_lock, git
from infrarsi.controller.contract.launch import apply_config_edits, config_target
from infrarsi.controller.errors import PatchError, ScopeError
from infrarsi.controller.store.stage_records import Scope, as_scope

PROMOTED_FILE = "infrarsi.promoted.yaml"


def apply_result(repo: Path, scope: Scope | dict[str, Any], result: dict[str, Any], pack_text: str,
                 branch: str | None = None) -> dict[str, Any]:
    """Apply the promoted candidate of ``result`` (result.json) to ``repo``; returns what was written."""
    scope = as_scope(scope)
    if branch and git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).strip():
        raise ScopeError(f"branch {branch} already exists in {repo}")
    changed = changed_since_lock(repo, scope)
    if changed:
        raise ScopeError(f"{changed[0]} changed since init (locked at {scope.commit[:10]}): "
                         f"refusing to apply; start a new campaign")
    promoted = result.get("promoted")
    patches = list(promoted["patches"]) if promoted else []
    texts = [(p, scope.patches[p]) for p in patches]
    edits = _config_edits(pack_text)
    for rel in edits:  # refuse a config file that leads out of the repo before anything is written
        config_target(repo, rel)
    if (repo / PROMOTED_FILE).is_symlink():
        raise ScopeError(f"{repo / PROMOTED_FILE} is a symlink (to {os.readlink(repo / PROMOTED_FILE)}): "
                         f"refusing to write through it")
    if branch:
        start = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
        git(repo, "checkout", "-q", "-b", branch)
    prefix = scope.prefix.rstrip("/")
    for name, text in texts:
        args = ["apply", "--whitespace=nowarn"] + (["--index"] if branch else [])
        args += ([f"--directory={prefix}"] if prefix else []) + ["-"]
        try:
            git(repo, *args, stdin=text)
        except ScopeError as exc:
            if branch:  # leave the repo as it was: back to the start branch, new branch deleted
                git(repo, "checkout", "-q", "-f", start, check=False)
                git(repo, "branch", "-q", "-D", branch, check=False)
            raise PatchError(f"patch {name} does not apply to {repo}: {str(exc).split(': ', 1)[-1]}") from None
    if edits:
        apply_config_edits(repo, edits)
    (repo / PROMOTED_FILE).write_text(pack_text)
    files = sorted({*(_touched(t) for _, t in texts), PROMOTED_FILE, *edits})
    if branch:
        git(repo, "add", "--", PROMOTED_FILE, *edits)
        git(repo, *identity_flags(repo), "commit", "-q", "--no-verify", "-m",
            f"infrarsi: apply campaign {result['campaign']['id']} ({result['delivered_speedup']:.2f}x verified)")
    return {"branch": branch, "patches": patches, "files": [f for f in files if f], "speedup": result["delivered_speedup"]}


def identity_flags(repo: Path) -> list[str]:
    """``-c user.name=infrarsi -c user.email=infrarsi@localhost`` for the parts of the committer identity the user
    has not configured (``user.name``/``user.email`` in git config, or ``GIT_COMMITTER_*``/``GIT_AUTHOR_*``);
    empty when the user has both: a fresh HOME without ``~/.gitconfig`` can still commit."""
    out: list[str] = []
    for key, envs, default in (("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"), "infrarsi"),
                               ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"), "infrarsi@localhost")):
        have = all(os.environ.get(e) for e in envs) or git(repo, "config", "--get", key, check=False).strip()
        if not have:
            out += ["-c", f"{key}={default}"]
    return out


def _touched(diff: str) -> str:
    for line in diff.splitlines():
        if line.startswith("+++ b/"):
            return line[6:]
    return ""


def _config_edits(pack_text: str) -> dict[str, dict[str, Any]]:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(pack_text) or {}
    return dict(doc.get("config_edits") or {})


def load_result(report_dir: Path) -> dict[str, Any]:
    """The campaign's result.json; ScopeError when the campaign has not reached the report stage."""
    path = report_dir / "result.json"
    if not path.is_file():
        raise ScopeError(f"{path} does not exist: the campaign has not finished ('infrarsi run' first)")
    return json.loads(path.read_text())
