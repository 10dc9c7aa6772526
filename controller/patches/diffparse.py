"""Read a unified diff (``git diff`` format, or plain ``diff -u`` with ``a/`` ``b/`` prefixes) into per-file changes.

:func:`parse_diff` never touches the filesystem.  Paths are returned as written after
removing the first component (``-p1``, what ``git apply`` does by default); ``raw_paths``
keeps them as written so callers can refuse absolute paths.  Lines are split at ``\n`` only, as git does.
Binary data (``GIT binary patch``, ``Binary files ... differ``, ``literal N``/``delta N`` blocks) marks the
current file change ``binary`` wherever it appears outside a hunk body (also after ``---``/``+++`` headers);
a ``diff --git`` line whose names cannot be read is an error rather than skipped.  Hunk lines are counted
with the hunk header's lengths, so a removed line that starts with ``--`` is not taken
for a file header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_QUOTED_OR_WORD = r'("(?:[^"\\]|\\.)*"|\S+)'
_GIT = re.compile(rf"^diff --git {_QUOTED_OR_WORD} {_QUOTED_OR_WORD}\s*$")
#: Lines that start binary data in git's patch format, wherever they appear outside a hunk body.
_BINARY = re.compile(r"^(GIT binary patch\s*$|Binary files .* differ\s*$|(literal|delta) \d+\s*$)")
SYMLINK_MODE = "120000"


class DiffParseError(ValueError):
    """The text is not a unified diff this reader understands (message names the line)."""


@dataclass
class FileChange:
    """One file's part of a diff.

    ``old_path``/``new_path`` are ``None`` for a created/deleted file; ``old_mode``/``new_mode``
    are git modes (``100644``, ``120000`` for a symlink) where the header gives them;
    ``added_lines`` holds the text of ``+`` lines (for symlink targets).
    """

    old_path: str | None = None
    new_path: str | None = None
    raw_paths: list[str] = field(default_factory=list)
    old_mode: str | None = None
    new_mode: str | None = None
    binary: bool = False
    added: int = 0
    removed: int = 0
    added_lines: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        """Every path the change reads or writes (old and new), without duplicates."""
        out: list[str] = []
        for p in (self.old_path, self.new_path):
            if p is not None and p not in out:
                out.append(p)
        return out

    @property
    def symlink(self) -> bool:
        """True when the change creates, modifies or deletes a symlink."""
        return SYMLINK_MODE in (self.old_mode, self.new_mode)


def _unquote(path: str) -> str:
    path = path.split("\t", 1)[0].rstrip()
    if len(path) >= 2 and path[0] == '"' and path[-1] == '"':
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return path


def strip_prefix(raw: str) -> str:
    """``a/model.py`` -> ``model.py`` (``-p1``); DiffParseError when there is no component to strip."""
    if "/" not in raw:
        raise DiffParseError(f"path '{raw}' has no a/ or b/ prefix")
    return raw.split("/", 1)[1]


def parse_diff(text: str) -> list[FileChange]:
    """Split ``text`` into :class:`FileChange` records, in order; DiffParseError on malformed hunks."""
    changes: list[FileChange] = []
    cur: FileChange | None = None
    in_git_header = False
    old_left = new_left = 0
    lines = text.split("\n")  # git's line ends only: str.splitlines() also splits at \x0c, \x85, U+2028 ...
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        line = lines[i]
        if old_left > 0 or new_left > 0:
            assert cur is not None
            tag = line[:1]
            if tag == "\\":
                pass
            elif tag == "+":
                cur.added += 1
                cur.added_lines.append(line[1:])
                new_left -= 1
            elif tag == "-":
                cur.removed += 1
                old_left -= 1
            elif tag == " " or line == "":
                old_left -= 1
                new_left -= 1
            else:
                raise DiffParseError(f"line {i + 1}: hunk ends early ({line[:40]!r})")
            i += 1
            continue
        if _BINARY.match(line):
            if cur is None:
                raise DiffParseError(f"line {i + 1}: binary data before any file header")
            cur.binary = True
            i += 1
            continue
        m = _GIT.match(line)
        if line.startswith("diff --git ") and not m:
            raise DiffParseError(f"line {i + 1}: cannot read the file names of {line[:60]!r}")
        if m:
            cur = FileChange()
            changes.append(cur)
            cur.raw_paths = [_unquote(m.group(1)), _unquote(m.group(2))]
            cur.old_path = strip_prefix(cur.raw_paths[0])
            cur.new_path = strip_prefix(cur.raw_paths[1])
            in_git_header = True
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_raw, new_raw = _unquote(line[4:]), _unquote(lines[i + 1][4:])
            if cur is None or not in_git_header:
                cur = FileChange()
                changes.append(cur)
            cur.raw_paths = [p for p in (old_raw, new_raw) if p != "/dev/null"] or cur.raw_paths
            cur.old_path = None if old_raw == "/dev/null" else strip_prefix(old_raw)
            cur.new_path = None if new_raw == "/dev/null" else strip_prefix(new_raw)
            in_git_header = False
            i += 2
            continue
        elif cur is not None and in_git_header:
            if line.startswith(("new file mode ", "new mode ")):
                cur.new_mode = line.rsplit(" ", 1)[1]
                if line.startswith("new file mode "):
                    cur.old_path = None
            elif line.startswith(("deleted file mode ", "old mode ")):
                cur.old_mode = line.rsplit(" ", 1)[1]
                if line.startswith("deleted file mode "):
                    cur.new_path = None
            elif line.startswith(("rename from ", "copy from ")):
                cur.old_path = _unquote(line.split(" ", 2)[2])
                cur.raw_paths.append(cur.old_path)
            elif line.startswith(("rename to ", "copy to ")):
                cur.new_path = _unquote(line.split(" ", 2)[2])
                cur.raw_paths.append(cur.new_path)
            elif line.startswith("index "):
                parts = line.split()
                if len(parts) == 3 and cur.new_mode is None:
                    cur.old_mode = cur.new_mode = parts[2]
        h = _HUNK.match(line)
        if h:
            if cur is None:
                raise DiffParseError(f"line {i + 1}: hunk before any file header")
            old_left = int(h.group(2)) if h.group(2) is not None else 1
            new_left = int(h.group(4)) if h.group(4) is not None else 1
            in_git_header = False
        i += 1
    if old_left > 0 or new_left > 0:
        raise DiffParseError("the last hunk is truncated")
    return changes
