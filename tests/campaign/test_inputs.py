"""Read-only inputs not in git (contract ``inputs:``): locking at init, the per-launch re-check, and -- like an
attacker -- what a job inside the real bubblewrap sandbox can do to an input (read it at its relative path; never
write, create, delete or rename in it)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from infrarsi.controller.campaign.inputs import (
    InputChanged, check_inputs, lock_inputs, make_mount_points, mount_points,
)
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import ScopeError
from infrarsi.verifier import sandbox
from infrarsi.verifier.exec import ExecOptions, WrapperError, run_wrapped
from tests.campaign.helpers import git as _git

DATA = b"tokens" * 1000


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A repo whose data/ holds a committed prepare.py and git-ignored *.bin files (the issue's nanoGPT layout)."""
    r = tmp_path / "repo"
    (r / "data" / "sub").mkdir(parents=True)
    (r / "train.py").write_text("print('hi')\n")
    (r / "data" / "prepare.py").write_text("# makes train.bin\n")
    (r / ".gitignore").write_text("data/*.bin\ndata/sub/\n")
    (r / "data" / "train.bin").write_bytes(DATA)
    (r / "data" / "sub" / "val.bin").write_bytes(b"val" * 10)
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-qm", "base")
    assert "train.bin" not in _git(r, "ls-files")
    return r


def _contract(*inputs: dict, frozen: list[str] | None = None) -> Contract:
    return Contract.model_validate({
        "name": "t", "launch": {"command": "python3 train.py"}, "workload": {"tokens_per_update": 4, "seq_len": 2},
        "frozen_files": frozen or [], "editable_files": ["train.py"], "inputs": list(inputs)})


def test_lock_records_ignored_files_and_refuses_what_leads_out(repo: Path, tmp_path: Path) -> None:
    items = lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd")
    (item,) = items
    assert (item["at"], item["kind"], item["files"]) == ("data", "dir", 3)
    man = json.loads(Path(item["manifest"]).read_text())
    assert set(man["files"]) == {"prepare.py", "train.bin", "sub/val.bin"}
    assert man["files"]["train.bin"][0] == len(DATA)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, repo / "escape")
    with pytest.raises(ScopeError, match="outside the repository"):
        lock_inputs(repo, _contract({"path": "escape"}), tmp_path / "wd")
    with pytest.raises(ScopeError, match="outside the repository|leaves the repository"):
        lock_inputs(repo, _contract({"path": "../elsewhere"}), tmp_path / "wd")
    with pytest.raises(ScopeError, match=".git"):
        lock_inputs(repo, _contract({"path": ".git/objects"}), tmp_path / "wd")
    with pytest.raises(ScopeError, match="git repository"):
        lock_inputs(repo, _contract({"path": str(repo)}), tmp_path / "wd")
    os.symlink("/etc/passwd", repo / "data" / "sub" / "leak")
    with pytest.raises(ScopeError, match="outside the input"):
        lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd")
    os.unlink(repo / "data" / "sub" / "leak")
    home = tmp_path / "home"
    (home / "scratch").mkdir(parents=True)
    with pytest.raises(ScopeError, match="infrarsi's own state"):
        lock_inputs(repo, _contract({"path": str(home)}), tmp_path / "wd", forbidden=[home / "scratch"])
    with pytest.raises(ScopeError, match="would hide data/prepare.py"):
        lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd", locked_files=["data/prepare.py"])
    with pytest.raises(ScopeError, match="overlaps"):
        lock_inputs(repo, _contract({"path": "data"}, {"path": "data/sub"}), tmp_path / "wd")
    with pytest.raises(ScopeError, match="does not exist"):
        lock_inputs(repo, _contract({"path": "nope"}), tmp_path / "wd")
    fifo = repo / "data" / "sub" / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ScopeError, match="not a regular file"):
        lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd")


def test_recheck_is_cheap_and_names_a_changed_missing_or_new_file(repo: Path, tmp_path: Path) -> None:
    items = lock_inputs(repo, _contract({"path": "data"}, {"path": str(repo / "train.py"), "at": "tok.json"}),
                        tmp_path / "wd")
    check_inputs(items)
    os.utime(repo / "data" / "train.bin")  # touched, same bytes: re-hashed, still fine
    check_inputs(items)
    data = repo / "data" / "train.bin"
    st = os.stat(data)
    data.write_bytes(DATA[:-1] + b"X")  # same size, and the old mtime restored: a size+mtime check would miss it,
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))  # but the ctime moved (no one can set it back): re-hashed
    with pytest.raises(InputChanged, match=r"inputs: 'data': train.bin changed since init"):
        check_inputs(items)
    data.write_bytes(DATA)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    check_inputs(items)
    (repo / "data" / "sub" / "new.bin").write_bytes(b"x")
    with pytest.raises(InputChanged, match="sub/new.bin is new since init"):
        check_inputs(items)
    (repo / "data" / "sub" / "new.bin").unlink()
    (repo / "data" / "sub" / "val.bin").unlink()
    with pytest.raises(InputChanged, match="sub/val.bin is missing since init"):
        check_inputs(items)
    (repo / "data" / "sub" / "val.bin").write_bytes(b"val" * 10)  # same bytes, new mtime: re-hashed, fine
    check_inputs(items)
    (repo / "train.py").write_text("print('changed')\n")
    with pytest.raises(InputChanged, match="'.*train.py': train.py changed since init"):
        check_inputs(items)
    Path(items[0]["manifest"]).write_text("{}")
    with pytest.raises(InputChanged, match="modified after init"):
        check_inputs(items[:1])


def test_digest_none_locks_nothing(repo: Path, tmp_path: Path) -> None:
    items = lock_inputs(repo, _contract({"path": "data", "digest": "none"}), tmp_path / "wd")
    assert "manifest" not in items[0]
    (repo / "data" / "train.bin").write_bytes(b"other")
    check_inputs(items)


def test_trial_tree_gets_an_empty_mount_point_and_refuses_a_committed_link(repo: Path, tmp_path: Path) -> None:
    items = lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd")
    src = tmp_path / "trial" / "src"
    wd = prepare_source(repo, _git(repo, "rev-parse", "HEAD").strip(), src, [], {}, inputs=items)
    assert (wd / "data").is_dir() and not any((wd / "data").iterdir())  # committed prepare.py replaced by the mount
    assert mount_points(wd, items) == [(str((repo / "data").resolve()), str(wd / "data"))]
    remove_source(repo, src)
    assert (repo / "data" / "train.bin").read_bytes() == DATA
    # a commit whose tree has a link where the input mounts: refused, nothing bound through it
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink("/tmp", linked / "data")
    with pytest.raises(ScopeError, match="symlink"):
        make_mount_points(linked, linked, items)


# ---------------------------------------------------------------- the sandbox, attacked

ATTACK = textwrap.dedent("""
    import errno, json, os, sys
    out = {}
    out["read"] = open("data/train.bin", "rb").read() == b"tokens" * 1000
    out["sub"] = open("data/sub/val.bin", "rb").read() == b"val" * 10
    def attempt(name, fn):
        try:
            fn()
            out[name] = "succeeded"
        except OSError as exc:
            out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    attempt("write", lambda: open("data/train.bin", "ab").write(b"evil"))
    attempt("truncate", lambda: os.truncate("data/train.bin", 0))
    attempt("create", lambda: open("data/planted.bin", "wb").write(b"x"))
    attempt("unlink", lambda: os.unlink("data/sub/val.bin"))
    attempt("chmod", lambda: os.chmod("data/train.bin", 0o777))
    attempt("rename_mount", lambda: os.rename("data", "moved"))
    attempt("rmtree_mount", lambda: os.rmdir("data"))
    print("RESULT " + json.dumps(out))
""")


def _wrapped(tmp_path: Path, repo: Path, isolation: str) -> tuple[int, dict, Path]:
    items = lock_inputs(repo, _contract({"path": "data"}), tmp_path / "wd")
    src = tmp_path / "t" / "src"
    wd = prepare_source(repo, _git(repo, "rev-parse", "HEAD").strip(), src, [], {}, inputs=items)
    (wd / "attack.py").write_text(ATTACK)
    out = tmp_path / "t" / "out"
    opts = ExecOptions(argv=[sys.executable, "attack.py"], out_dir=out, cwd=str(wd), src=str(src),
                       scratch=str(tmp_path / "t" / "scratch"), isolation=isolation, echo=False,
                       ro_inputs=mount_points(wd, items), timeout_s=60)
    rc = run_wrapped(opts)
    log = (out / "job.log").read_text()
    line = next((ln for ln in log.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, log
    return rc, json.loads(line[7:]), wd


@pytest.mark.skipif(sandbox.probe(sandbox.find_bwrap()) is not None, reason="bubblewrap cannot run here")
def test_a_job_reads_the_input_but_cannot_change_it(repo: Path, tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in (repo / "data").rglob("*") if p.is_file()}
    rc, res, wd = _wrapped(tmp_path, repo, "bwrap")
    assert rc == 0
    assert res["read"] and res["sub"], res  # git-ignored files at the same relative path
    for attack in ("write", "truncate", "create", "unlink", "chmod"):
        assert res[attack] == "EROFS", (attack, res)
    assert res["rename_mount"] in ("EBUSY", "EROFS", "EXDEV") and res["rmtree_mount"] in ("EBUSY", "EROFS"), res
    after = {p: p.read_bytes() for p in (repo / "data").rglob("*") if p.is_file()}
    assert after == before and not (repo / "data" / "planted.bin").exists()
    assert not any((wd / "data").iterdir())  # the host-side mount point stayed empty


def test_without_a_sandbox_the_input_is_a_symlink(repo: Path, tmp_path: Path) -> None:
    rc, res, wd = _wrapped(tmp_path, repo, "none")
    assert res["read"] and res["sub"], res
    assert res["rename_mount"] == "succeeded"  # unsandboxed: the job renamed the link (not what it points to)
    assert (wd / "moved").is_symlink() and os.readlink(wd / "moved") == str((repo / "data").resolve())
    # unsandboxed, nothing stops the (trusted) job writing through: the next launch's check catches it
    assert res["write"] == "succeeded"
    manifest = tmp_path / "wd" / "inputs" / "0.json"
    item = {"name": "data", "path": str((repo / "data").resolve()), "kind": "dir", "digest": "lock",
            "manifest": str(manifest), "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()}
    with pytest.raises(InputChanged, match="inputs: 'data': "):
        check_inputs([item])


def test_the_wrapper_refuses_an_input_it_cannot_see_or_that_exposes_the_trial(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    out = tmp_path / "out"
    base = dict(argv=["true"], out_dir=out, cwd=str(src), src=str(src), isolation="none", echo=False)
    with pytest.raises(WrapperError, match="not found on this node"):
        run_wrapped(ExecOptions(**base, ro_inputs=[(str(tmp_path / "gone"), str(src / "data"))]))
    with pytest.raises(WrapperError, match="overlaps the trial's own"):
        run_wrapped(ExecOptions(**base, ro_inputs=[(str(tmp_path), str(src / "data"))]))
    os.symlink(tmp_path, src / "link")
    (tmp_path / "data").mkdir()
    with pytest.raises(WrapperError, match="passes through the symlink"):
        run_wrapped(ExecOptions(**base, ro_inputs=[(str(tmp_path / "data"), str(src / "link" / "x"))]))


def test_the_sbatch_script_hands_the_inputs_to_the_wrapper_quoted(tmp_path: Path) -> None:
    import shlex

    from infrarsi.controller.executors.base import TrialSpec
    from infrarsi.controller.executors.render import render_sbatch

    odd = "/shared/data sets/owt;$(touch pwned)"
    spec = TrialSpec(trial_id="t1", workdir=tmp_path / "src", outdir=tmp_path / "out", argv=("python3", "train.py"),
                     ro_inputs=((odd, str(tmp_path / "src" / "data" / "owt")),))
    script = render_sbatch(spec, "/usr/bin/python3")
    line = next(ln for ln in script.splitlines() if "--ro-input" in ln)
    args = shlex.split(line)
    i = args.index("--ro-input")
    assert args[i + 1:i + 3] == [odd, str(tmp_path / "src" / "data" / "owt")]
