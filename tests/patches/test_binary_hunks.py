"""Attack: smuggle binary content (uncounted by ``max_changed_lines``, unreadable by review) through patch intake.

Every shape is real ``git diff`` / ``git diff --binary`` output, or that output rearranged in a way ``git apply``
still accepts (shown by a control).  Each is refused with one line naming the patch and the file.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from infrarsi.controller.errors import PatchError
from infrarsi.controller.patches import apply_patches, check_patch, load_patch_dir

EDITABLE = ["train.py", "*.bin", "pkg/**"]
TRAIN = "def main():\n    x = 1\n    return x\n"


def _git(repo: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, input=input)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "train.py").write_text(TRAIN)
    rng = random.Random(0)
    (r / "old.bin").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-qm", "base")
    return r


def _new_file_diff(repo: Path, rel: str, data: bytes, *flags: str) -> str:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_bytes(data)
    _git(repo, "add", "-N", rel)
    out = _git(repo, "diff", *flags, "--", rel).stdout
    _git(repo, "rm", "-q", "--cached", rel)
    (repo / rel).unlink()
    return out


def _check(repo: Path, text: str, limit: int = 50) -> object:
    return check_patch(repo, text, EDITABLE, [], limit, name="evil.diff")


def _refused(repo: Path, text: str, pattern: str) -> str:
    with pytest.raises(PatchError, match=pattern) as exc:
        _check(repo, text)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def _applies(repo: Path, text: str) -> bool:
    """Control: does plain ``git apply --check`` accept ``text`` in ``repo``?"""
    return _git(repo, "apply", "--check", "-", input=text).returncode == 0


def test_new_binary_file_git_binary_patch(repo: Path) -> None:
    text = _new_file_diff(repo, "w.bin", b"\x00\x01weights\x00" * 50, "--binary")
    assert "GIT binary patch" in text and "literal" in text
    assert _applies(repo, text)
    _refused(repo, text, r"^patch evil.diff: carries a binary change to 'w.bin'$")


def test_modified_binary_file_literal_or_delta(repo: Path) -> None:
    data = bytearray((repo / "old.bin").read_bytes())
    data[100:104] = b"\x00\x00\x00\x00"
    (repo / "old.bin").write_bytes(bytes(data))
    text = _git(repo, "diff", "--binary").stdout
    _git(repo, "checkout", "-q", "--", "old.bin")
    assert "delta " in text or "literal " in text
    _refused(repo, text, r"carries a binary change to 'old.bin'")


def test_binary_files_differ_without_binary_flag(repo: Path) -> None:
    text = _new_file_diff(repo, "w.bin", b"\x00" * 10)
    assert "Binary files /dev/null and b/w.bin differ" in text
    _refused(repo, text, r"carries a binary change to 'w.bin'")


def test_binary_hunk_after_dev_null_header(repo: Path) -> None:
    """The red-team shape: ``---/+++`` headers (which ended the old parser's header state), then binary data."""
    text = _new_file_diff(repo, "w.bin", b"\x00payload\x00" * 40, "--binary")
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("GIT binary patch"))
    crafted = "\n".join(lines[:at] + ["--- /dev/null", "+++ b/w.bin"] + lines[at:])
    assert _applies(repo, crafted)  # git still applies it: the shape is live
    _refused(repo, crafted, r"^patch evil.diff: carries a binary change to 'w.bin'$")


def test_binary_block_after_a_text_hunk_and_bare_literal_blocks(repo: Path) -> None:
    (repo / "train.py").write_text(TRAIN.replace("x = 1", "x = 2"))
    text_diff = _git(repo, "diff").stdout
    _git(repo, "checkout", "-q", "--", "train.py")
    binary = _new_file_diff(repo, "w.bin", b"\x00" * 64, "--binary")
    block = binary[binary.index("GIT binary patch"):]
    _refused(repo, text_diff + block, r"carries a binary change to 'train.py'")
    literal_only = text_diff + block[block.index("literal"):]
    _refused(repo, literal_only, r"carries a binary change to 'train.py'")


def test_nul_byte_in_a_text_hunk(repo: Path) -> None:
    (repo / "train.py").write_text(TRAIN.replace("x = 1", "x = 2"))
    text = _git(repo, "diff").stdout
    _git(repo, "checkout", "-q", "--", "train.py")
    msg = _refused(repo, text.replace("+    x = 2", "+    x = '\x00'"), r"holds a NUL byte")
    assert "'train.py'" in msg


def test_invalid_utf8_in_a_patch_file(repo: Path, tmp_path: Path) -> None:
    (repo / "train.py").write_text(TRAIN.replace("x = 1", "x = 2"))
    raw = _git(repo, "diff").stdout.encode().replace(b"x = 2", b"x = '\xff\xfe'")
    _git(repo, "checkout", "-q", "--", "train.py")
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "evil.diff").write_bytes(raw)
    [(name, text)] = load_patch_dir(pdir)
    msg = _refused(repo, text, r"^patch evil.diff: is not valid UTF-8 in 'train.py' \(line \d+\)")
    assert "binary data is refused" in msg


def test_an_added_files_lines_are_counted(repo: Path) -> None:
    body = "".join(f"V{i} = {i}\n" for i in range(60))
    text = _new_file_diff(repo, "pkg/new.py", body.encode())
    assert text.count("\n+V") == 60
    _refused(repo, text, r"changes 60 lines \(\+60 -0\), over the limit of 50")
    info = check_patch(repo, text, EDITABLE, [], 100, name="ok.diff")
    assert (info.added, info.removed) == (60, 0)


def test_lines_split_like_git_not_like_python(repo: Path) -> None:
    """U+2028 and form feeds are line breaks for str.splitlines(), not for git: counted as one line each."""
    (repo / "train.py").write_text(TRAIN.replace("x = 1", "x = '\u2028\x0c'"))
    text = _git(repo, "diff").stdout
    _git(repo, "checkout", "-q", "--", "train.py")
    info = check_patch(repo, text, EDITABLE, [], 50, name="ok.diff")
    assert (info.added, info.removed) == (1, 1)


def test_unreadable_file_names_are_refused(repo: Path) -> None:
    (repo / "train.py").write_text(TRAIN.replace("x = 1", "x = 2"))
    text = _git(repo, "diff").stdout.replace("diff --git a/train.py b/train.py", "diff --git a/train.py b/tr ain.py")
    _git(repo, "checkout", "-q", "--", "train.py")
    _refused(repo, text, r"is not a unified diff: line 1: cannot read the file names")


def test_apply_patches_refuses_binary_too(repo: Path, tmp_path: Path) -> None:
    text = _new_file_diff(repo, "w.bin", b"\x00" * 32, "--binary")
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("GIT binary patch"))
    crafted = "\n".join(lines[:at] + ["--- /dev/null", "+++ b/w.bin"] + lines[at:])
    work = tmp_path / "tree"
    work.mkdir()
    with pytest.raises(PatchError, match=r"^patch evil.diff: carries a binary change to 'w.bin'$"):
        apply_patches(work, [("evil.diff", crafted)])
    assert not (work / "w.bin").exists()
