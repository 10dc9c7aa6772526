"""Attack: make the controller run code from the user's repository, or reach that repository from a trial.

A repository whose hooks, ``core.fsmonitor``, filter/diff drivers (``.git/config`` + a committed
``.gitattributes``) and ``diff.external`` all append to a marker file.  The attack is first shown to be armed
(the old code's ``git worktree add``, ``git status`` and ``git checkout -b`` fire it); then init (scope lock +
patch intake), a trial source tree, the combined diff and ``apply --branch`` must leave no marker.  And the
red-team's attack: a job writing ``.git/hooks/post-checkout`` through ``src/.git``: there is no ``src/.git``,
and whatever the job plants in its own tree never runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.campaign.apply import apply_result
from infrarsi.controller.campaign.artifacts import combined_diff
from infrarsi.controller.campaign.scope import lock_scope
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.contract.loader import load_contract
from tests.campaign.helpers import TOY, git_env

HOOKS = ("post-checkout", "pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "reference-transaction",
         "post-index-change", "pre-auto-gc", "post-rewrite", "pre-applypatch", "post-applypatch")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=git_env()).stdout


def _script(path: Path, marker: Path, tag: str, tail: str = "") -> Path:
    path.write_text(f"#!/bin/sh\necho {tag} >> {marker}\n{tail}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture()
def armed(tmp_path: Path) -> tuple[Path, Path]:
    """``(repo, marker)``: the toy workload with every hook and command-running setting armed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("train.py",):
        (repo / name).write_text((TOY / name).read_text())
    contract = (TOY / "infrarsi.yaml").read_text() + "patches:\n  dir: patches\n"
    (repo / "infrarsi.yaml").write_text(contract)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (repo / "patches").mkdir()  # an untracked patch folder, as users keep one
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n# faster\n")
    (repo / "patches" / "p.diff").write_text(_git(repo, "diff", "--", "train.py"))
    _git(repo, "checkout", "-q", "--", "train.py")
    marker = tmp_path / "MARKER"
    hooks = repo / ".git" / "hooks"
    for hook in HOOKS:
        _script(hooks / hook, marker, hook)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fsmon = _script(bin_ / "fsmonitor", marker, "fsmonitor")
    filt = _script(bin_ / "filter", marker, "filter", "cat\n")
    ext = _script(bin_ / "extdiff", marker, "extdiff")
    for key, value in (("core.fsmonitor", str(fsmon)), ("filter.evil.smudge", str(filt)),
                       ("filter.evil.clean", str(filt)), ("filter.evil.required", "true"),
                       ("diff.evil.command", str(ext)), ("diff.evil.textconv", str(filt)),
                       ("diff.external", str(ext)), ("commit.gpgSign", "true"), ("gpg.program", str(ext))):
        _git(repo, "config", key, value)
    return repo, marker


def _fired(marker: Path) -> list[str]:
    return sorted(set(marker.read_text().split())) if marker.exists() else []


def test_the_attack_is_armed_against_plain_git(armed: tuple[Path, Path], tmp_path: Path) -> None:
    """Control: what the old code ran (a worktree, git status, checkout -b) runs the attacker's commands."""
    repo, marker = armed
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tmp_path / "wt"), "HEAD"],
                   capture_output=True, env=git_env())
    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, env=git_env())
    fired = _fired(marker)
    assert {"post-checkout", "filter", "fsmonitor"} <= set(fired), fired


def test_init_trial_tree_diff_and_apply_run_nothing_from_the_repo(armed: tuple[Path, Path], tmp_path: Path) -> None:
    repo, marker = armed
    contract = load_contract(repo / "infrarsi.yaml")
    scope = lock_scope(repo, contract, "digest")
    assert list(scope["patches"]) == ["p.diff"], scope["refused_patches"]
    src = tmp_path / "trial" / "src"
    workdir = prepare_source(repo, scope["commit"], src, [("p.diff", scope["patches"]["p.diff"])], {})
    assert "# faster" in (workdir / "train.py").read_text()
    assert "faster" in combined_diff(repo, scope, ["p.diff"])
    result = {"campaign": {"id": 1}, "delivered_speedup": 1.2, "promoted": {"patches": ["p.diff"]}}
    apply_result(repo, scope, result, "knobs: {}\n", branch="infrarsi-faster")
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "infrarsi-faster"
    remove_source(repo, src)
    assert _fired(marker) == []


def test_a_job_cannot_plant_hooks_through_its_tree(armed: tuple[Path, Path], tmp_path: Path) -> None:
    """The red-team attack: code running in src/ writes ``.git/hooks/post-checkout`` (and a ``.git`` file
    pointing at the user's repository, and a fake ``.git/config``); the next trial and the cleanup run none."""
    repo, marker = armed
    for hook in HOOKS:  # only the job's planted hooks are armed now
        (repo / ".git" / "hooks" / hook).unlink()
    _git(repo, "config", "--unset", "core.fsmonitor")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    src = tmp_path / "t1" / "src"
    prepare_source(repo, commit, src, [], {})
    assert not os.path.lexists(src / ".git")
    job = (  # what a patched train.py would do with its cwd = src/
        "import os, pathlib, sys\n"
        "repo_git, marker = sys.argv[1], sys.argv[2]\n"
        "hook = f'#!/bin/sh\\necho planted >> {marker}\\n'\n"
        "try:\n"
        "    open('.git/hooks/post-checkout', 'w').write(hook)\n"
        "    sys.exit('reached the user repository through src/.git')\n"
        "except FileNotFoundError:\n"
        "    pass\n"
        "pathlib.Path('sub/.git/hooks').mkdir(parents=True)\n"
        "for d in ('sub/.git/hooks',):\n"
        "    p = pathlib.Path(d, 'post-checkout'); p.write_text(hook); p.chmod(0o755)\n"
        "pathlib.Path('sub/.git/config').write_text(f'[core]\\n\\tfsmonitor = {marker}.sh\\n')\n"
        "pathlib.Path('.git').write_text(f'gitdir: {repo_git}\\n')\n"
    )
    proc = subprocess.run(["python3", "-c", job, str(repo / ".git"), str(marker)], cwd=src, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    src2 = tmp_path / "t2" / "src"
    prepare_source(repo, commit, src2, [], {})  # the next trial
    remove_source(repo, src)  # cleanup treats the planted .git file as a legacy worktree: hardened prune only
    remove_source(repo, src2)
    assert _fired(marker) == [] and not src.exists()
    assert (repo / ".git").is_dir() and _git(repo, "rev-parse", "HEAD").strip() == commit
