"""Trial source trees: an export of the locked commit (no .git), patches and config edits, monorepo prefixes,
removal without the repository, the combined diff, and ``infrarsi apply --branch`` without a git identity."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.campaign.apply import apply_result
from infrarsi.controller.campaign.artifacts import combined_diff
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.errors import PatchError
from tests.campaign.helpers import git as _git

TRAIN = "import json\n\n\ndef main():\n    lr = 1\n    return lr\n"


def _diff(repo: Path, rel: str, new: str) -> str:
    """A real ``git diff`` (relative to ``repo``) that turns ``rel`` into ``new``; the file is restored."""
    path = repo / rel
    old = path.read_text() if path.exists() else None
    path.write_text(new)
    if old is None:
        _git(repo, "add", "-N", rel)
    out = _git(repo, "diff", "--relative", "--", rel)
    if old is None:
        _git(repo, "rm", "-q", "--cached", rel)
        path.unlink()
    else:
        path.write_text(old)
    return out


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "pkg").mkdir(parents=True)
    (r / "train.py").write_text(TRAIN)
    (r / "pkg" / "util.py").write_text("A = 1\n")
    (r / "config.json").write_text(json.dumps({"opt": {"lr": 1}}))
    (r / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (r / "run.sh").chmod(0o755)
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-qm", "base")
    return r


def _git_entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".git"))


def test_export_has_the_commit_patches_and_edits_and_no_git_link(repo: Path, tmp_path: Path) -> None:
    patch = _diff(repo, "train.py", TRAIN.replace("lr = 1", "lr = 2"))
    (repo / "pkg" / "util.py").write_text("A = 'uncommitted'\n")  # the locked commit is exported, not the worktree
    before = sorted(p.name for p in (repo / ".git").iterdir())
    src = tmp_path / "trials" / "k" / "src"
    workdir = prepare_source(repo, _git(repo, "rev-parse", "HEAD").strip(), src, [("p.diff", patch)],
                             {"config.json": {"opt.lr": 3}})
    assert workdir == src
    assert _git_entries(src) == []
    assert "lr = 2" in (src / "train.py").read_text()
    assert (src / "pkg" / "util.py").read_text() == "A = 1\n"
    assert json.loads((src / "config.json").read_text()) == {"opt": {"lr": 3}}
    assert os.access(src / "run.sh", os.X_OK)
    assert sorted(p.name for p in (repo / ".git").iterdir()) == before  # nothing written into the user's .git
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # no worktree registered
    assert sorted(p.name for p in src.parent.iterdir()) == ["src"]  # the private git directory is gone
    proc = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=src, capture_output=True, text=True,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(src.parent)})
    assert proc.returncode != 0  # code running in src/ finds no repository at all


def test_prepare_is_idempotent_and_a_conflict_names_the_patch(repo: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    commit = _git(repo, "rev-parse", "HEAD").strip()
    prepare_source(repo, commit, src, [], {})
    (src / "stray.txt").write_text("left by a crashed attempt")
    prepare_source(repo, commit, src, [], {})
    assert not (src / "stray.txt").exists()
    bad = _diff(repo, "train.py", TRAIN.replace("lr = 1", "lr = 2")).replace("-    lr = 1", "-    lr = 9")
    with pytest.raises(PatchError, match=r"^patch bad.diff: conflicts in .*src"):
        prepare_source(repo, commit, src, [("bad.diff", bad)], {})


def test_monorepo_prefix(tmp_path: Path) -> None:
    mono = tmp_path / "mono"
    (mono / "proj").mkdir(parents=True)
    (mono / "shared").mkdir()
    (mono / "shared" / "lib.py").write_text("X = 1\n")
    (mono / "proj" / "train.py").write_text(TRAIN)
    (mono / "proj" / "cfg.yaml").write_text("opt:\n  lr: 1\n")
    _git(mono, "init", "-q")
    _git(mono, "add", "-A")
    _git(mono, "commit", "-qm", "base")
    patch = _diff(mono / "proj", "train.py", TRAIN.replace("lr = 1", "lr = 5"))
    assert patch.startswith("diff --git a/train.py")
    src = tmp_path / "t" / "src"
    commit = _git(mono, "rev-parse", "HEAD").strip()
    workdir = prepare_source(mono / "proj", commit, src, [("p.diff", patch)], {"cfg.yaml": {"opt.lr": 7}},
                             prefix="proj/")
    assert workdir == src / "proj/"
    assert "lr = 5" in (workdir / "train.py").read_text()
    assert "lr: 7" in (workdir / "cfg.yaml").read_text()
    assert (src / "shared" / "lib.py").is_file() and _git_entries(src) == []
    scope = {"commit": commit, "prefix": "proj/", "patches": {"p.diff": patch}}
    diff = combined_diff(mono / "proj", scope, ["p.diff"])
    assert diff.startswith("diff --git a/train.py b/train.py") and "+    lr = 5" in diff


def test_remove_source_needs_no_repo_and_prunes_legacy_worktrees(repo: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    prepare_source(repo, "HEAD", src, [], {})
    locked = src / "pkg" / "locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0)
    (src / "outside-link").symlink_to(repo)  # removal must not follow links out of the tree
    remove_source(None, src)
    assert not src.exists() and (repo / "train.py").is_file()
    remove_source(None, src)  # a missing tree is fine
    legacy = tmp_path / "legacy"  # what older versions made: a registered worktree
    _git(repo, "worktree", "add", "-q", "--detach", str(legacy), "HEAD")
    assert (legacy / ".git").is_file()
    remove_source(repo, legacy)
    assert not legacy.exists()
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_combined_diff_of_two_patches_on_one_file_and_a_new_file(repo: Path, tmp_path: Path) -> None:
    one = _diff(repo, "train.py", TRAIN.replace("lr = 1", "lr = 2"))
    base2 = TRAIN.replace("import json", "import json\nimport os")
    two = _diff(repo, "train.py", base2)
    new = _diff(repo, "pkg/extra.py", "B = 2\n")
    scope = {"commit": _git(repo, "rev-parse", "HEAD").strip(), "prefix": "", "patches": {"1": one, "2": two, "3": new}}
    diff = combined_diff(repo, scope, ["1", "2", "3"])
    assert "pkg/extra.py" in diff and "+    lr = 2" in diff and "+import os" in diff
    proc = subprocess.run(["git", "-C", str(repo), "apply", "--check", "-"], input=diff, text=True,
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert _git_entries(repo) == [".git"]


def test_apply_branch_commits_without_a_git_identity(repo: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _diff(repo, "train.py", TRAIN.replace("lr = 1", "lr = 2"))
    from infrarsi.controller.campaign.scope import sha256_file

    scope = {"commit": _git(repo, "rev-parse", "HEAD").strip(), "prefix": "", "patches": {"p.diff": patch},
             "frozen": {}, "editable_digests": {"train.py": sha256_file(repo / "train.py")}}
    result = {"campaign": {"id": 7}, "delivered_speedup": 1.5, "promoted": {"patches": ["p.diff"]}}
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.gitconfig: no user.name / user.email anywhere
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    out = apply_result(repo, scope, result, "config_edits:\n  config.json:\n    opt.lr: 4\n", branch="faster")
    assert out["branch"] == "faster" and "config.json" in out["files"]
    log = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%an <%ae>|%s", "faster"],
                         capture_output=True, text=True, check=True).stdout
    assert log.startswith("infrarsi <infrarsi@localhost>|infrarsi: apply campaign 7 (1.50x verified)")
    changed = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", "HEAD~1", "faster"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert sorted(changed) == ["config.json", "infrarsi.promoted.yaml", "train.py"]
