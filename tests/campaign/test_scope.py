"""``controller/campaign/scope.py`` directly: the scope lock of the toy repo, patch intake, refusals, drift."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.campaign.scope import changed_since_lock, expand_globs, lock_scope, sha256_file
from infrarsi.controller.contract import contract_digest, load_contract
from infrarsi.controller.errors import ScopeError
from tests.campaign.helpers import TOY, git_env, git_repo


def _lock(repo: Path) -> dict:
    contract = load_contract(repo / "infrarsi.yaml")
    return lock_scope(repo, contract, contract_digest(contract))


def _diff(repo: Path, rel: str, old: str, new: str) -> str:
    path = repo / rel
    text = path.read_text()
    path.write_text(text.replace(old, new, 1))
    diff = subprocess.run(["git", "-C", str(repo), "diff", "--", rel], capture_output=True, text=True,
                          check=True).stdout
    path.write_text(text)
    assert diff, f"no change made in {rel}"
    return diff


def test_lock_records_commit_frozen_and_editable_digests(tmp_path: Path) -> None:
    repo = git_repo(TOY, tmp_path / "toy")
    scope = _lock(repo)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert scope["commit"] == head and scope["prefix"] == ""
    assert scope["frozen"] == {"infrarsi.yaml": sha256_file(repo / "infrarsi.yaml")}
    assert scope["editable"] == ["train.py"] and scope["editable_digests"]["train.py"] == sha256_file(repo / "train.py")
    assert scope["patches"] == {} and scope["refused_patches"] == {}
    assert changed_since_lock(repo, scope) == []
    (repo / "train.py").write_text("# changed\n")
    assert changed_since_lock(repo, scope) == ["train.py"]


def test_patch_intake_accepts_editable_and_refuses_frozen(tmp_path: Path) -> None:
    repo = git_repo(TOY, tmp_path / "toy")
    pdir = repo / "patches"
    pdir.mkdir()
    (pdir / "good.diff").write_text(_diff(repo, "train.py", "default=0.08", "default=0.07"))
    (pdir / "frozen.diff").write_text(_diff(repo, "infrarsi.yaml", "trials: 4", "trials: 5"))
    with (repo / "infrarsi.yaml").open("a") as fh:
        fh.write("patches:\n  dir: patches\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "patches"], check=True, env=git_env())
    scope = _lock(repo)
    assert list(scope["patches"]) == ["good.diff"] and "default=0.07" in scope["patches"]["good.diff"]
    assert list(scope["refused_patches"]) == ["frozen.diff"]
    assert "\n" not in scope["refused_patches"]["frozen.diff"]


def test_dirty_frozen_file_and_missing_repo_are_one_line_errors(tmp_path: Path) -> None:
    repo = git_repo(TOY, tmp_path / "toy")
    contract = load_contract(repo / "infrarsi.yaml")
    (repo / "infrarsi.yaml").write_text((repo / "infrarsi.yaml").read_text() + "# dirty\n")
    with pytest.raises(ScopeError, match="frozen file infrarsi.yaml has uncommitted changes") as info:
        lock_scope(repo, contract, contract_digest(contract))
    assert "\n" not in str(info.value)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ScopeError, match="is not a git repository"):
        lock_scope(plain, contract, contract_digest(contract))


def test_globs_never_leave_the_repository(tmp_path: Path) -> None:
    repo = git_repo(TOY, tmp_path / "toy")
    assert expand_globs(repo, ["*.py"]) == ["train.py"]
    with pytest.raises(ScopeError, match="leaves the repository"):
        expand_globs(repo, ["../*"])
    (tmp_path / "outside.py").write_text("x = 1\n")
    (repo / "link.py").symlink_to(tmp_path / "outside.py")
    with pytest.raises(ScopeError, match="points to"):
        expand_globs(repo, ["link.py"])
