"""Patch intake: refuse a candidate diff before it runs, and apply accepted diffs to a trial checkout.

:func:`check_patch` refuses (raises :class:`~infrarsi.controller.errors.PatchError`, one line naming
the patch and the path) a diff that

* is empty or not a unified diff, or carries binary data in any shape: ``GIT binary patch``,
  ``Binary files ... differ``, ``literal``/``delta`` blocks anywhere outside a hunk body (also after
  ``---``/``+++`` headers), a NUL byte, or bytes that are not UTF-8 (:func:`refuse_binary_bytes`);
* names an absolute path or one with ``..`` (leaves the repo), or a path inside ``.git``;
* creates a symlink (pointing out of the repo, or anywhere), or touches a path that is a
  symlink in the repo or lies under a symlinked directory;
* touches a frozen file (a ``frozen`` glob) or a file matching no ``editable`` glob;
* changes more lines (added + removed) than ``max_changed_lines``;
* does not apply cleanly (``git apply --check`` against the repo's working files);
* leaves a touched ``.py`` file that no longer parses (``ast.parse`` after applying to a
  temporary copy).

Every hunk's lines (also those of an added file) count toward ``max_changed_lines``.
``git apply`` runs with the controller's hardened git flags and environment
(:func:`infrarsi.controller.campaign.scope.safe_flags`), and always with ``GIT_CEILING_DIRECTORIES`` set to the
directory's parent:
a repo that is a sub-directory of a larger git repository would otherwise make git skip
every path silently.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from infrarsi.controller.campaign.scope import driver_overrides, git_env, safe_flags
from infrarsi.controller.errors import PatchError
from infrarsi.controller.patches.diffparse import DiffParseError, FileChange, parse_diff

PATCH_SUFFIXES = (".diff", ".patch")


@dataclass(frozen=True)
class PatchInfo:
    """An accepted patch: ``files`` it touches (sorted), ``added``/``removed`` lines, ``sha256`` of the text."""

    name: str
    files: tuple[str, ...]
    added: int
    removed: int
    sha256: str

    @property
    def changed_lines(self) -> int:
        """Added plus removed lines (what the per-step limit counts)."""
        return self.added + self.removed


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:[^/]+/)*"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out += re.escape(c)
            else:
                body = pattern[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out += "[" + body.replace("\\", "\\\\") + "]"
                i = j
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


def glob_match(path: str, pattern: str) -> bool:
    """True when repo-relative ``path`` matches glob ``pattern`` (``*``, ``?``, ``[..]`` within a
    segment, ``**`` across segments) or lies under a directory the pattern names."""
    pattern = pattern.strip().removeprefix("./").rstrip("/")
    if not pattern:
        return False
    rx = _glob_regex(pattern)
    if rx.match(path):
        return True
    parts = path.split("/")
    return any(rx.match("/".join(parts[:n])) for n in range(1, len(parts)))


def _refuse(name: str, reason: str) -> PatchError:
    return PatchError(f"patch {name}: {reason}")


def _git_env(workdir: Path) -> dict[str, str]:
    """Hardened git environment (no inherited ``GIT_*``, no system config) with the ceiling at ``workdir``'s parent."""
    return git_env({"GIT_CEILING_DIRECTORIES": str(workdir.resolve().parent)})


def _file_at(text: str, offset: int) -> str:
    """The path of the file section of ``text`` that holds character ``offset`` ('?' before any header)."""
    path = "?"
    for line in text[:offset].split("\n"):
        if line.startswith("diff --git "):
            path = line.rsplit(" ", 1)[-1].strip().strip('"').split("/", 1)[-1]
        elif line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            path = line[4:].split("\t", 1)[0].strip().strip('"').split("/", 1)[-1]
    return path


def refuse_binary_bytes(name: str, text: str) -> None:
    """PatchError naming the patch and the file when ``text`` holds a NUL byte or bytes that are not UTF-8
    (decoded with ``surrogateescape``: lone surrogates U+DC80..U+DCFF): binary data in any form is refused."""
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise _refuse(name, f"holds a NUL byte (binary data) in '{_file_at(text, nul)}' (line {line})")
    bad = next((i for i, ch in enumerate(text) if "\udc80" <= ch <= "\udcff"), -1)
    if bad < 0:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = exc.start
    if bad >= 0:
        line = text.count("\n", 0, bad) + 1
        raise _refuse(name, f"is not valid UTF-8 in '{_file_at(text, bad)}' (line {line}): binary data is refused")


def _refuse_binary_changes(name: str, changes: list[FileChange]) -> None:
    for ch in changes:
        if ch.binary:
            raise _refuse(name, f"carries a binary change to '{(ch.paths or ['?'])[0]}'")


def _git_apply(workdir: Path, text: str, check: bool) -> str | None:
    """Run ``git apply`` (``--check`` when ``check``) in ``workdir``; the first error line, or None on success."""
    env = _git_env(workdir)
    args = ["git", *safe_flags(), *driver_overrides(workdir, env), "apply", *(["--check"] if check else [])]
    try:
        proc = subprocess.run(args, cwd=workdir, input=text.encode("utf-8", "surrogateescape"),
                              capture_output=True, env=env, timeout=60)
    except FileNotFoundError:
        return "git is not installed"
    except subprocess.TimeoutExpired:
        return "git apply timed out"
    if proc.returncode == 0:
        return None
    lines = [ln.strip() for ln in proc.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or [f"git apply exited {proc.returncode}"])[0]


def _path_problems(repo: Path, change: FileChange) -> str | None:
    """The first path-safety problem of one file change (leaving the repo, .git, symlinks), or None."""
    for raw in change.raw_paths:
        if raw.startswith("/") and raw != "/dev/null":
            return f"path '{raw}' is absolute: it leaves the repo"
    root = repo.resolve()
    for path in change.paths:
        pp = PurePosixPath(path)
        if pp.is_absolute() or path.startswith("/"):
            return f"path '{path}' is absolute: it leaves the repo"
        if ".." in pp.parts:
            return f"path '{path}' leaves the repo ('..')"
        if ".git" in pp.parts:
            return f"path '{path}' is inside .git"
        for n in range(1, len(pp.parts) + 1):
            sub = repo.joinpath(*pp.parts[:n])
            if sub.is_symlink():
                what = "is a symlink" if n == len(pp.parts) else f"lies under the symlink '{'/'.join(pp.parts[:n])}'"
                return f"'{path}' {what} in the repo"
        target = repo.joinpath(*pp.parts).resolve()
        if target != root and root not in target.parents:
            return f"path '{path}' resolves outside the repo"
    if change.symlink:
        path = change.new_path or change.old_path or "?"
        if change.new_path is not None and change.new_mode == "120000" and change.added_lines:
            link_target = change.added_lines[0]
            dest = os.path.normpath(os.path.join(os.path.dirname(change.new_path), link_target))
            if link_target.startswith("/") or dest == ".." or dest.startswith("../"):
                return f"creates a symlink '{path}' -> '{link_target}' pointing out of the repo"
        return f"'{path}' is a symlink: patches may not create or change symlinks"
    return None


#: CPython 3.11's AST constructor keeps its recursion counter per interpreter, not per thread, so two threads
#: parsing at once can fail with a spurious "SystemError: AST constructor recursion depth mismatch"
#: (python/cpython#106905).  Proposers check patches from several threads at once, so parses take turns.
_AST_LOCK = threading.Lock()


def _parse(source: bytes, filename: str) -> None:
    """``ast.parse`` one file, one thread at a time (see :data:`_AST_LOCK`); raises SyntaxError."""
    with _AST_LOCK:
        ast.parse(source, filename=filename)


def check_patch(repo: Path, diff_text: str, editable: list[str], frozen: list[str], max_changed_lines: int,
                name: str = "<patch>") -> PatchInfo:
    """Check one candidate diff against ``repo``'s working files; return its :class:`PatchInfo`.

    ``editable`` and ``frozen`` are the contract's globs (relative to ``repo``); a path
    matching a frozen glob is refused even when it is also editable.  ``name`` (the patch
    file name) starts every error message.  Raises PatchError (see module docstring).
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise _refuse(name, f"repo {repo} is not a directory")
    if not diff_text.strip():
        raise _refuse(name, "is empty")
    refuse_binary_bytes(name, diff_text)
    try:
        changes = parse_diff(diff_text)
    except DiffParseError as exc:
        raise _refuse(name, f"is not a unified diff: {exc}") from None
    if not changes:
        raise _refuse(name, "is not a unified diff: no file headers ('--- a/...', '+++ b/...')")
    _refuse_binary_changes(name, changes)
    for ch in changes:
        problem = _path_problems(repo, ch)
        if problem:
            raise _refuse(name, problem)
    files = sorted({p for ch in changes for p in ch.paths})
    for path in files:
        hit = next((g for g in frozen if glob_match(path, g)), None)
        if hit is not None:
            raise _refuse(name, f"touches frozen file '{path}' (frozen_files: '{hit}')")
    for path in files:
        if not any(glob_match(path, g) for g in editable):
            raise _refuse(name, f"touches '{path}', which is not an editable file (editable_files: {list(editable)})")
    added = sum(ch.added for ch in changes)
    removed = sum(ch.removed for ch in changes)
    if added + removed > max_changed_lines:
        raise _refuse(name, f"changes {added + removed} lines (+{added} -{removed}), over the limit of "
                            f"{max_changed_lines} (patches.max_changed_lines)")
    with tempfile.TemporaryDirectory(prefix="infrarsi-intake-") as tmp:
        work = Path(tmp) / "tree"
        work.mkdir()
        for path in files:
            src = repo / path
            if src.is_file():
                dst = work / path
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        err = _git_apply(work, diff_text, check=True)
        if err is not None:
            raise _refuse(name, f"does not apply cleanly to {repo}: {err}")
        err = _git_apply(work, diff_text, check=False)
        if err is not None:
            raise _refuse(name, f"does not apply cleanly to {repo}: {err}")
        for ch in changes:
            if ch.new_path is None or not ch.new_path.endswith(".py"):
                continue
            source = (work / ch.new_path).read_bytes()
            try:
                _parse(source, ch.new_path)
            except SyntaxError as exc:
                raise _refuse(name, f"leaves '{ch.new_path}' unparsable (line {exc.lineno}: {exc.msg})") from None
    digest = hashlib.sha256(diff_text.encode("utf-8", "surrogateescape")).hexdigest()
    return PatchInfo(name=name, files=tuple(files), added=added, removed=removed, sha256=digest)


def apply_patches(workdir: Path, diffs: list[tuple[str, str]]) -> list[str]:
    """Apply ``(name, diff text)`` pairs to ``workdir`` in order with ``git apply``; return the names applied.

    Each patch is checked for paths that leave ``workdir`` and then applied atomically
    (``git apply`` changes nothing when any hunk fails).  On a conflict raises PatchError
    naming the patch; patches applied before it stay applied.
    """
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise PatchError(f"apply: {workdir} is not a directory")
    applied: list[str] = []
    for name, text in diffs:
        refuse_binary_bytes(name, text)
        try:
            changes = parse_diff(text)
        except DiffParseError as exc:
            raise _refuse(name, f"is not a unified diff: {exc}") from None
        _refuse_binary_changes(name, changes)
        for ch in changes:
            problem = _path_problems(workdir, ch)
            if problem:
                raise _refuse(name, problem)
        err = _git_apply(workdir, text, check=True) or _git_apply(workdir, text, check=False)
        if err is not None:
            after = f" (after {', '.join(applied)})" if applied else ""
            raise _refuse(name, f"conflicts in {workdir}{after}: {err}")
        applied.append(name)
    return applied


def load_patch_dir(directory: Path) -> list[tuple[str, str]]:
    """Every ``*.diff``/``*.patch`` file in ``directory`` (not recursive, hidden files skipped) as
    ``(file name, text)``, sorted by name.  PatchError when ``directory`` is not a directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PatchError(f"patches.dir: {directory} is not a directory")
    out: list[tuple[str, str]] = []
    for p in sorted(directory.iterdir(), key=lambda q: q.name):
        if p.name.startswith(".") or not p.name.endswith(PATCH_SUFFIXES) or not p.is_file():
            continue
        out.append((p.name, p.read_bytes().decode("utf-8", "surrogateescape")))
    return out
