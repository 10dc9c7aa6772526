"""Attack: a committed symlink makes the controller write (config knobs, ``apply``) or hash (frozen/editable
globs) a file outside the repository.  The victim stays untouched and each refusal is one line naming the file
and where it points."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.campaign.apply import apply_result
from infrarsi.controller.campaign.scope import expand_globs, lock_scope
from infrarsi.controller.campaign.sourcetree import prepare_source
from infrarsi.controller.contract.launch import apply_config_edits
from infrarsi.controller.contract.loader import load_contract
from infrarsi.controller.errors import PatchError, ScopeError
from tests.campaign.helpers import TOY, git_env

VICTIM = {"owner": "someone else"}
CONFIG_KNOB = """  - name: lr
    values: [1, 2]
    reference: 1
    apply: {config: {file: config.json, key: opt.lr}}
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=git_env()).stdout


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.json"
    v.write_text(json.dumps(VICTIM))
    return v


def _repo(tmp_path: Path, links: dict[str, Path], yaml_extra: str = "") -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text((TOY / "train.py").read_text())
    text = (TOY / "infrarsi.yaml").read_text()
    if yaml_extra:
        text = text.replace("couplings:", yaml_extra + "couplings:")
    (repo / "infrarsi.yaml").write_text(text)
    for rel, target in links.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).symlink_to(target)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_init_refuses_a_config_knob_file_that_links_out(tmp_path: Path, victim: Path) -> None:
    repo = _repo(tmp_path, {"config.json": victim}, CONFIG_KNOB)
    with pytest.raises(ScopeError) as exc:
        lock_scope(repo, load_contract(repo / "infrarsi.yaml"), "digest")
    msg = _one_line(exc)
    assert "config file 'config.json' points to" in msg and str(victim) in msg
    assert json.loads(victim.read_text()) == VICTIM


def test_trial_config_edit_through_a_committed_symlink_fails_the_trial(tmp_path: Path, victim: Path) -> None:
    repo = _repo(tmp_path, {"config.json": victim, "conf": tmp_path})
    src = tmp_path / "t" / "src"
    commit = _git(repo, "rev-parse", "HEAD").strip()
    assert (json.loads(victim.read_text()) == VICTIM)
    for rel in ("config.json", "conf/victim.json"):  # the file itself, or a directory on its way, links out
        with pytest.raises(PatchError) as exc:
            prepare_source(repo, commit, src, [], {rel: {"opt.lr": 2}})
        msg = _one_line(exc)
        assert f"config file '{rel}' points to {victim}, outside the tree" in msg
        assert json.loads(victim.read_text()) == VICTIM
    for rel in ("../victim.json", "/tmp/x.json", ".git/config"):
        with pytest.raises(PatchError, match=r"leaves the tree"):
            apply_config_edits(src, {rel: {"a": 1}})


def test_a_link_inside_the_tree_is_followed(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "configs").mkdir(parents=True)
    (work / "configs" / "base.json").write_text('{"opt": {"lr": 1}}')
    (work / "config.json").symlink_to("configs/base.json")
    apply_config_edits(work, {"config.json": {"opt.lr": 5}})
    assert (work / "config.json").is_symlink()
    assert json.loads((work / "configs" / "base.json").read_text()) == {"opt": {"lr": 5}}


def test_apply_refuses_before_writing_anything(tmp_path: Path, victim: Path) -> None:
    repo = _repo(tmp_path, {"config.json": victim})
    scope = {"commit": _git(repo, "rev-parse", "HEAD").strip(), "prefix": "", "patches": {}, "frozen": {},
             "editable_digests": {}}
    result = {"campaign": {"id": 3}, "delivered_speedup": 1.1, "promoted": None}
    with pytest.raises(PatchError) as exc:
        apply_result(repo, scope, result, "config_edits:\n  config.json:\n    opt.lr: 9\n", branch="b")
    assert str(victim) in _one_line(exc)
    assert json.loads(victim.read_text()) == VICTIM
    assert not (repo / "infrarsi.promoted.yaml").exists()
    assert _git(repo, "branch", "--list", "b") == "" and _git(repo, "status", "--porcelain") == ""


def test_apply_refuses_a_promoted_file_that_is_a_symlink(tmp_path: Path, victim: Path) -> None:
    repo = _repo(tmp_path, {"infrarsi.promoted.yaml": victim})
    scope = {"commit": "x", "prefix": "", "patches": {}, "frozen": {}, "editable_digests": {}}
    result = {"campaign": {"id": 3}, "delivered_speedup": 1.1, "promoted": None}
    with pytest.raises(ScopeError, match=r"infrarsi.promoted.yaml is a symlink"):
        apply_result(repo, scope, result, "knobs: {}\n")
    assert json.loads(victim.read_text()) == VICTIM


def test_frozen_and_editable_globs_refuse_links_out(tmp_path: Path, victim: Path) -> None:
    repo = _repo(tmp_path, {"data/train.bin": victim, "ext": tmp_path, "data/inside.py": Path("../train.py")})
    with pytest.raises(ScopeError) as exc:
        expand_globs(repo, ["data/*"], "frozen_files")
    msg = _one_line(exc)
    assert msg.startswith("frozen_files: 'data/train.bin' (matched by 'data/*') points to") and str(victim) in msg
    with pytest.raises(ScopeError, match=r"^editable_files: 'ext/victim.json' .* outside the repository"):
        expand_globs(repo, ["ext/*.json"], "editable_files")
    with pytest.raises(ScopeError, match=r"pattern '../\*' leaves the repository"):
        expand_globs(repo, ["../*"], "frozen_files")
    assert expand_globs(repo, ["data/*.py"]) == ["data/inside.py"]  # links that stay inside are fine
    text = (repo / "infrarsi.yaml").read_text().replace("frozen_files: [infrarsi.yaml]",
                                                          "frozen_files: [infrarsi.yaml, data/*]")
    (repo / "infrarsi.yaml").write_text(text)
    with pytest.raises(ScopeError, match=r"data/train.bin"):
        lock_scope(repo, load_contract(repo / "infrarsi.yaml"), "digest")
