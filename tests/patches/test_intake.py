"""Patch intake against a real git repository in tmp_path: every refusal, with its message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.errors import PatchError
from infrarsi.controller.patches import PatchInfo, apply_patches, check_patch, glob_match, load_patch_dir, parse_diff

EDITABLE = ["train.py", "model.py", "pkg/**/*.py"]
FROZEN = ["data.py", "infrarsi*.yaml"]
TRAIN = "import os\n\n\ndef main():\n    x = 1\n    y = 2\n    return x + y\n\n\nif __name__ == '__main__':\n    main()\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "pkg" / "sub").mkdir(parents=True)
    (r / "train.py").write_text(TRAIN)
    (r / "model.py").write_text("class M:\n    pass\n")
    (r / "data.py").write_text("SEED = 1\n")
    (r / "infrarsi.yaml").write_text("name: t\n")
    (r / "notes.txt").write_text("hello\n")
    (r / "pkg" / "sub" / "util.py").write_text("A = 1\n")
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "base")
    return r


def _diff(repo: Path, edits: dict[str, str]) -> str:
    """A real ``git diff`` for ``edits`` (path -> new content); the tree is restored afterwards."""
    for path, text in edits.items():
        (repo / path).write_text(text)
    out = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    return out


def _check(repo: Path, text: str, limit: int = 50) -> PatchInfo:
    return check_patch(repo, text, EDITABLE, FROZEN, limit, name="cand.diff")


def test_accepts_clean_patch_and_reports_it(repo: Path) -> None:
    text = _diff(repo, {"train.py": TRAIN.replace("y = 2", "y = 3"), "model.py": "class M:\n    x = 1\n"})
    info = _check(repo, text)
    assert info.name == "cand.diff"
    assert info.files == ("model.py", "train.py")
    assert (info.added, info.removed, info.changed_lines) == (2, 2, 4)
    assert len(info.sha256) == 64
    assert (repo / "train.py").read_text() == TRAIN  # intake never touches the repo


def test_refuses_patch_that_does_not_apply(repo: Path) -> None:
    text = _diff(repo, {"train.py": TRAIN.replace("y = 2", "y = 3")})
    (repo / "train.py").write_text(TRAIN.replace("y = 2", "y = 5"))
    with pytest.raises(PatchError, match=r"patch cand.diff: does not apply cleanly .*train.py"):
        _check(repo, text)


def test_refuses_frozen_file_even_if_editable(repo: Path) -> None:
    text = _diff(repo, {"data.py": "SEED = 2\n"})
    with pytest.raises(PatchError, match=r"patch cand.diff: touches frozen file 'data.py' \(frozen_files: 'data.py'\)"):
        check_patch(repo, text, ["*.py"], FROZEN, 50, name="cand.diff")
    text = _diff(repo, {"infrarsi.yaml": "name: u\n"})
    with pytest.raises(PatchError, match="frozen file 'infrarsi.yaml'"):
        _check(repo, text)


def test_refuses_file_that_is_not_editable(repo: Path) -> None:
    text = _diff(repo, {"notes.txt": "bye\n"})
    with pytest.raises(PatchError, match="touches 'notes.txt', which is not an editable file"):
        _check(repo, text)


def test_editable_glob_with_double_star(repo: Path) -> None:
    text = _diff(repo, {"pkg/sub/util.py": "A = 2\n"})
    assert _check(repo, text).files == ("pkg/sub/util.py",)


@pytest.mark.parametrize("path, reason", [
    ("../evil.py", "leaves the repo"),
    ("pkg/../../evil.py", "leaves the repo"),
])
def test_refuses_dotdot_paths(repo: Path, path: str, reason: str) -> None:
    text = f"--- a/{path}\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"
    with pytest.raises(PatchError, match=f"patch cand.diff: path '{path}' {reason}"):
        _check(repo, text)


def test_refuses_absolute_path(repo: Path) -> None:
    text = "--- /etc/hosts\n+++ /etc/hosts\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchError, match="path '/etc/hosts' is absolute: it leaves the repo"):
        _check(repo, text)


def test_refuses_git_internals(repo: Path) -> None:
    text = "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchError, match=r"inside \.git"):
        check_patch(repo, text, ["**"], [], 50, name="cand.diff")


def test_refuses_existing_symlink_and_symlinked_dir(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.py").write_text(TRAIN)
    os.symlink("model.py", repo / "alias.py")
    text = "--- a/alias.py\n+++ b/alias.py\n@@ -1,2 +1,2 @@\n class M:\n-    pass\n+    x = 1\n"
    with pytest.raises(PatchError, match="'alias.py' is a symlink in the repo"):
        check_patch(repo, text, ["*.py"], FROZEN, 50, name="cand.diff")
    os.symlink(outside, repo / "ext")
    text = "--- a/ext/train.py\n+++ b/ext/train.py\n@@ -5 +5 @@\n-    x = 1\n+    x = 9\n"
    with pytest.raises(PatchError, match="'ext/train.py' lies under the symlink 'ext' in the repo"):
        check_patch(repo, text, ["**/*.py"], FROZEN, 50, name="cand.diff")


def test_refuses_creating_symlinks(repo: Path) -> None:
    out = ("diff --git a/link.py b/link.py\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
           "+++ b/link.py\n@@ -0,0 +1 @@\n+../../etc/passwd\n\\ No newline at end of file\n")
    with pytest.raises(PatchError, match=r"creates a symlink 'link.py' -> '../../etc/passwd' pointing out of the repo"):
        check_patch(repo, out, ["*.py"], FROZEN, 50, name="cand.diff")
    inside = out.replace("../../etc/passwd", "data.py")
    with pytest.raises(PatchError, match="'link.py' is a symlink: patches may not create or change symlinks"):
        check_patch(repo, inside, ["*.py"], FROZEN, 50, name="cand.diff")


def test_refuses_too_many_changed_lines(repo: Path) -> None:
    body = TRAIN + "".join(f"Z{i} = {i}\n" for i in range(10))
    text = _diff(repo, {"train.py": body})
    assert _check(repo, text, limit=10).changed_lines == 10
    with pytest.raises(PatchError, match=r"changes 10 lines \(\+10 -0\), over the limit of 9"):
        _check(repo, text, limit=9)


def test_refuses_patch_leaving_unparsable_python(repo: Path) -> None:
    text = _diff(repo, {"train.py": TRAIN.replace("    y = 2\n", "    y = (2\n")})
    with pytest.raises(PatchError, match=r"leaves 'train.py' unparsable \(line \d+"):
        _check(repo, text)


def test_refuses_empty_garbage_and_binary(repo: Path) -> None:
    with pytest.raises(PatchError, match="cand.diff: is empty"):
        _check(repo, "  \n")
    with pytest.raises(PatchError, match="is not a unified diff: no file headers"):
        _check(repo, "just some text\n")
    with pytest.raises(PatchError, match="hunk ends early"):
        _check(repo, "--- a/train.py\n+++ b/train.py\n@@ -1,3 +1,3 @@\n-import os\nrandom\n")
    binary = "diff --git a/model.py b/model.py\nindex 1111111..2222222 100644\nGIT binary patch\nliteral 3\nKcmZ?wpb\n\n"
    with pytest.raises(PatchError, match="binary change to 'model.py'"):
        _check(repo, binary)


def test_removed_line_starting_with_dashes_is_counted_not_taken_for_a_header(repo: Path) -> None:
    (repo / "model.py").write_text("class M:\n    pass\n-- not python\n")
    _git(repo, "commit", "-qam", "dashes")
    text = _diff(repo, {"model.py": "class M:\n    pass\n"})
    changes = parse_diff(text)
    assert len(changes) == 1 and changes[0].removed == 1 and changes[0].added == 0


def test_repo_nested_in_a_larger_git_repo(tmp_path: Path) -> None:
    """git apply would silently skip every path when run in a sub-directory of a repository."""
    outer = tmp_path / "outer"
    inner = outer / "examples" / "ex"
    inner.mkdir(parents=True)
    (inner / "train.py").write_text(TRAIN)
    _git(outer, "init", "-q")
    _git(outer, "add", "-A")
    _git(outer, "commit", "-q", "-m", "x")
    text = "--- a/train.py\n+++ b/train.py\n@@ -4,3 +4,3 @@\n def main():\n-    x = 1\n+    x = 4\n     y = 2\n"
    assert _check(inner, text).files == ("train.py",)
    apply_patches(inner, [("p.diff", text)])
    assert "x = 4" in (inner / "train.py").read_text()
    bad = text.replace("x = 1", "x = 7")
    with pytest.raises(PatchError, match="does not apply cleanly"):
        _check(inner, bad)


def test_apply_patches_in_order_and_names_conflicts(repo: Path) -> None:
    first = _diff(repo, {"train.py": TRAIN.replace("x = 1", "x = 10")})
    second = _diff(repo, {"model.py": "class M:\n    y = 2\n"})
    conflicting = _diff(repo, {"train.py": TRAIN.replace("x = 1", "x = 20")})
    assert apply_patches(repo, [("a.diff", first), ("b.diff", second)]) == ["a.diff", "b.diff"]
    assert "x = 10" in (repo / "train.py").read_text()
    assert (repo / "model.py").read_text() == "class M:\n    y = 2\n"
    with pytest.raises(PatchError, match=r"patch c.diff: conflicts in .*: error: patch failed: train.py"):
        apply_patches(repo, [("c.diff", conflicting)])
    assert "x = 10" in (repo / "train.py").read_text()  # atomic: nothing of c.diff applied
    escape = "--- a/../x.py\n+++ b/../x.py\n@@ -0,0 +1 @@\n+x = 1\n"
    with pytest.raises(PatchError, match="patch e.diff: path '../x.py' leaves the repo"):
        apply_patches(repo, [("e.diff", escape)])


def test_load_patch_dir_sorted_and_filtered(tmp_path: Path) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "b.diff").write_text("B")
    (d / "a.patch").write_text("A")
    (d / ".hidden.diff").write_text("H")
    (d / "README.md").write_text("R")
    (d / "sub.diff").mkdir()
    assert load_patch_dir(d) == [("a.patch", "A"), ("b.diff", "B")]
    with pytest.raises(PatchError, match="is not a directory"):
        load_patch_dir(tmp_path / "missing")


@pytest.mark.parametrize("path, pattern, ok", [
    ("train.py", "train.py", True),
    ("train.py", "*.py", True),
    ("pkg/a.py", "*.py", False),
    ("pkg/a.py", "**/*.py", True),
    ("a.py", "**/*.py", True),
    ("pkg/sub/a.py", "pkg/**", True),
    ("pkg/sub/a.py", "pkg", True),
    ("infrarsi.gpu.yaml", "infrarsi*.yaml", True),
    ("model.py", "m?del.[p]y", True),
    ("model.pyc", "*.py", False),
])
def test_glob_match(path: str, pattern: str, ok: bool) -> None:
    assert glob_match(path, pattern) is ok


def test_python_parses_take_turns_across_threads(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proposers check patches from several threads; CPython 3.11's AST constructor is not thread-safe (a spurious
    SystemError, python/cpython#106905, seen in CI), so intake must never run two parses at once."""
    import ast
    import threading
    import time

    real, active, peak, guard = ast.parse, [0], [0], threading.Lock()

    def slow_parse(*args, **kwargs):
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)  # widen the window a second parse would need
        try:
            return real(*args, **kwargs)
        finally:
            with guard:
                active[0] -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    text = _diff(repo, {"train.py": TRAIN.replace("y = 2", "y = 3")})
    errors: list[BaseException] = []

    def check() -> None:
        try:
            _check(repo, text)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=check) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and peak[0] == 1
