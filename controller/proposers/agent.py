"""The ``agent`` proposer: an external coding-agent command run in a scratch copy of the repository's files, under
the same bubblewrap isolation as trials (:mod:`infrarsi.verifier.sandbox`); its proposal is the diff it leaves.

One request:

1. A fresh run folder under ``workdir``: ``tree/`` (a copy of the repo's regular files: symlinks, ``.git``,
   environments and caches left out, other files over 1 MiB unless editable, 64 MiB in all) and ``home/`` (the agent's ``HOME`` and ``TMPDIR``, where the
   prompt file ``prompt.md`` is written).  The pristine contents are kept in memory.
2. The command runs with ``tree/`` as working directory.  The prompt (:func:`build_prompt`, answer form
   ``edit``) goes to its stdin, or into ``home/prompt.md`` whose path replaces ``{prompt_file}`` in the command.
   Isolation ``bwrap`` (default): ``bwrap_argv`` with ``tree/`` and ``home/`` read-write, the read-only system and
   interpreter, ``ro_paths`` read-only, a clean environment (the sandbox's allow-list plus the ``env`` names given),
   the network shared only when ``network`` is true (agents reach their API), and the PID namespace killed with
   the command.  Isolation ``none``: the same environment, no sandbox.
3. ``timeout_s`` bounds the run (the process group is killed); a non-zero exit is a failed proposal with the last
   line of stderr.
4. The diff of ``tree/`` against the pristine contents (files changed, added, removed; ``__pycache__`` and
   ``*.pyc`` are not counted) must touch only editable files: an edit to any
   other file fails the proposal ("edited 'data.py', which is not an editable file").  The diff then passes
   ``patches.intake.check_patch`` against the repo like any patch, as one :class:`PatchProposal` with claimed gain 0.

The run folder is removed afterwards.  Nothing of the controller (its key, database URL, the LLM keys) reaches
the agent unless named in ``env`` (and names the sandbox denies, ``*TOKEN*``/``*SECRET*``/``PG*``..., never pass).
"""

from __future__ import annotations

import difflib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from infrarsi.controller.errors import one_line
from infrarsi.controller.proposers.base import PatchRules, PromptContext, Proposer, ProposerOutcome, finish, \
    prompt_digest
from infrarsi.controller.proposers.prompt import build_prompt
from infrarsi.controller.proposers.schema import PatchProposal, Proposal
from infrarsi.controller.proposers.spec import PROMPT_FILE_PLACEHOLDER, AgentSpec

MAX_FILE_BYTES = 1 << 20
MAX_TREE_BYTES = 64 << 20
IGNORED = ("**/__pycache__/**", "__pycache__/**", "**/*.pyc", "*.pyc")
#: folders never copied into the scratch tree (version control, environments, caches)
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", ".tox", ".ipynb_checkpoints"})
STDERR_KEEP = 64 << 10


class AgentError(Exception):
    """A failed agent run; the message is the one-line reason."""


def snapshot(root: Path) -> dict[str, bytes]:
    """Regular files under ``root`` as repo-relative path -> bytes (symlinks and :data:`SKIP_DIRS` other than
    ``__pycache__`` skipped).  AgentError for a file larger than 64 MiB (it is not read)."""
    out: dict[str, bytes] = {}
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS - {"__pycache__"}
                             and not os.path.islink(os.path.join(dirpath, d)))
        for f in sorted(filenames):
            p = Path(dirpath) / f
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            size = p.stat().st_size
            if size > MAX_TREE_BYTES:
                raise AgentError(f"agent left a file of {size} bytes in '{rel}' (at most {MAX_TREE_BYTES})")
            out[rel] = p.read_bytes()
    return out


def copy_tree(repo: Path, dest: Path, editable: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Copy ``repo``'s regular files into ``dest``; return what was copied (path -> bytes).

    Left out: symlinks, :data:`SKIP_DIRS`, files over 1 MiB unless they match an ``editable`` glob, and anything
    past 64 MiB in all (editable files first, so they are always there)."""
    from infrarsi.controller.patches.intake import glob_match

    repo = Path(repo)
    found: list[tuple[bool, str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(repo, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d)))
        for f in sorted(filenames):
            src = Path(dirpath) / f
            if src.is_symlink() or not src.is_file():
                continue
            rel = src.relative_to(repo).as_posix()
            found.append((not any(glob_match(rel, g) for g in editable), rel, src))
    files: dict[str, bytes] = {}
    total = 0
    for not_editable, rel, src in sorted(found):
        size = src.stat().st_size
        if (not_editable and size > MAX_FILE_BYTES) or total + size > MAX_TREE_BYTES:
            continue
        data = src.read_bytes()
        dst = dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        files[rel] = data
        total += size
    return dict(sorted(files.items()))


def _lines(data: bytes, path: str) -> list[str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AgentError(f"agent left binary (non UTF-8) content in '{path}'") from None
    if "\0" in text:
        raise AgentError(f"agent left binary content (NUL) in '{path}'")
    return text.splitlines(keepends=True)


def _hunks(a: list[str], b: list[str], a_name: str, b_name: str) -> str:
    out: list[str] = []
    for line in difflib.unified_diff(a, b, a_name, b_name, n=3):
        if line.startswith(("---", "+++")):
            out.append(line.rstrip("\n") + "\n")
        elif line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def unified_diff(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> str:
    """A git-format unified diff taking ``before`` to ``after`` (path -> bytes), files in path order."""
    parts: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        a = _lines(old, path) if old is not None else []
        b = _lines(new, path) if new is not None else []
        header = f"diff --git a/{path} b/{path}\n"
        if old is None:
            header += "new file mode 100644\n"
            body = _hunks(a, b, "/dev/null", f"b/{path}")
        elif new is None:
            header += "deleted file mode 100644\n"
            body = _hunks(a, b, f"a/{path}", "/dev/null")
        else:
            body = _hunks(a, b, f"a/{path}", f"b/{path}")
        if body:
            parts.append(header + body)
    return "".join(parts)


class AgentProposer(Proposer):
    """Patches from an external coding agent (see the module docstring)."""

    kind = "agent"

    def __init__(self, spec: AgentSpec, *, rules: PatchRules, workdir: Path, knobs: list[Any] | None = None,
                 prompt_chars: int = 28_000, isolation: str = "bwrap",
                 environ: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.model = os.path.basename(spec.argv[0])
        self.max_concurrent = spec.max_concurrent
        self.rules = rules
        self.knobs = list(knobs or [])
        self.workdir = Path(workdir)
        self.prompt_chars = prompt_chars
        if isolation not in ("bwrap", "none"):
            raise ValueError(f"isolation must be bwrap or none, not {isolation!r}")
        self.isolation = isolation
        self._environ = environ
        self._slots = threading.BoundedSemaphore(spec.max_concurrent)

    # ------------------------------------------------------------------ command line
    def _env(self, home: Path) -> dict[str, str]:
        from infrarsi.verifier.sandbox import job_env

        source = dict(os.environ if self._environ is None else self._environ)
        return job_env(source, passthrough=self.spec.env,
                       overrides={"HOME": str(home), "TMPDIR": str(home / "tmp"), "INFRARSI_PROPOSER": self.name})

    def _argv(self, tree: Path, home: Path, prompt_file: Path, env: dict[str, str]) -> list[str]:
        argv = [a.replace(PROMPT_FILE_PLACEHOLDER, str(prompt_file)) for a in self.spec.argv]
        if self.isolation == "none":
            return argv
        from infrarsi.verifier import sandbox

        bwrap = sandbox.find_bwrap()
        problem = sandbox.probe(bwrap)
        if problem is not None or bwrap is None:
            raise AgentError(f"sandbox unavailable ({problem}); set isolation none only on a trusted machine")
        pre = sandbox.bwrap_argv(bwrap, src=str(tree), scratch=str(home), cwd=str(tree), env=env)
        if self.spec.network:
            pre.insert(2, "--share-net")
        binds: list[str] = []
        for p in self.spec.ro_paths:
            rp = os.path.realpath(os.path.expanduser(p))
            binds += ["--ro-bind-try", rp, rp]
        cut = pre.index("--clearenv")
        return pre[:cut] + binds + pre[cut:] + ["--", *argv]

    def _run(self, argv: list[str], tree: Path, env: dict[str, str], stdin_text: str | None, logdir: Path
             ) -> None:
        """Run ``argv``; AgentError on timeout, a missing program or a non-zero exit (last stderr line)."""
        err_path = logdir / "stderr"
        out_path = logdir / "stdout"
        with open(err_path, "wb") as err, open(out_path, "wb") as out:
            try:
                proc = subprocess.Popen(argv, cwd=tree, env=env if self.isolation == "none" else {
                                            "PATH": os.environ.get("PATH", os.defpath)},
                                        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
            except OSError as exc:
                raise AgentError(f"cannot start agent command '{argv[0]}': {one_line(exc)}") from None
            try:
                if stdin_text is not None:
                    try:
                        proc.stdin.write(stdin_text.encode("utf-8"))  # type: ignore[union-attr]
                        proc.stdin.close()  # type: ignore[union-attr]
                    except (BrokenPipeError, OSError):
                        pass
                rc = proc.wait(timeout=self.spec.timeout_s)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                raise AgentError(f"agent did not finish within {self.spec.timeout_s:g} s (timeout); killed") from None
            except BaseException:
                self._kill(proc)
                raise
        if rc != 0:
            raise AgentError(f"agent exited {rc}: {self._last_line(err_path) or 'no stderr'}")

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    @staticmethod
    def _last_line(path: Path) -> str:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - STDERR_KEEP))
                data = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [ln.strip() for ln in data.splitlines() if ln.strip()]
        return one_line(lines[-1], 300) if lines else ""

    # ------------------------------------------------------------------ diff
    def _ignored(self, path: str) -> bool:
        from infrarsi.controller.patches.intake import glob_match

        return any(glob_match(path, g) for g in IGNORED)

    def _diff(self, before: dict[str, bytes], tree: Path) -> str:
        after = {p: d for p, d in snapshot(tree).items() if not self._ignored(p)}
        before = {p: d for p, d in before.items() if not self._ignored(p)}
        from infrarsi.controller.patches.intake import glob_match

        for path in sorted(set(before) | set(after)):
            if before.get(path) == after.get(path):
                continue
            frozen = next((g for g in self.rules.frozen if glob_match(path, g)), None)
            if frozen is not None:
                raise AgentError(f"agent edited frozen file '{path}' (frozen_files: '{frozen}')")
            if not any(glob_match(path, g) for g in self.rules.editable):
                what = "created" if path not in before else "deleted" if path not in after else "edited"
                raise AgentError(f"agent {what} '{path}', which is not an editable file")
        self._check_links(tree)
        return unified_diff(before, after)

    @staticmethod
    def _check_links(tree: Path) -> None:
        for dirpath, dirnames, filenames in os.walk(tree, followlinks=False):
            for n in dirnames + filenames:
                p = Path(dirpath) / n
                if p.is_symlink():
                    raise AgentError(f"agent created a symlink '{p.relative_to(tree).as_posix()}'")

    # ------------------------------------------------------------------ request
    def propose(self, ctx: PromptContext) -> ProposerOutcome:
        """Run the agent once for ``ctx``; never raises (see the module docstring)."""
        t0 = time.monotonic()
        prompt = build_prompt(ctx, self.prompt_chars, answer="edit")
        digest = prompt_digest(prompt)
        self.workdir.mkdir(parents=True, exist_ok=True)
        run = Path(tempfile.mkdtemp(prefix=f"agent-{self.name}-{uuid.uuid4().hex[:8]}-", dir=self.workdir))
        try:
            tree, home, logs = run / "tree", run / "home", run / "logs"
            for d in (tree, home, home / "tmp", logs):
                d.mkdir(parents=True)
            before = copy_tree(self.rules.repo, tree, self.rules.editable)
            prompt_file = home / "prompt.md"
            prompt_file.write_text(prompt, encoding="utf-8")
            env = self._env(home)
            argv = self._argv(tree, home, prompt_file, env)
            with self._slots:
                self._run(argv, tree, env, prompt if self.spec.prompt_on_stdin else None, logs)
            diff = self._diff(before, tree)
            if not diff:
                raise AgentError("agent left no change in the editable files")
            try:
                patch = PatchProposal(diff=diff, rationale=self._rationale(logs / "stdout"), claimed_gain=0.0)
            except ValueError as exc:
                raise AgentError(f"agent's diff is not a valid proposal: {one_line(exc)}") from None
        except AgentError as exc:
            return self.failed(exc, digest, wall_s=time.monotonic() - t0)
        except OSError as exc:
            return self.failed(f"agent run failed: {one_line(exc)}", digest, wall_s=time.monotonic() - t0)
        finally:
            _remove(run)
        return finish(self, Proposal(patches=[patch]), rules=self.rules, knobs=self.knobs, digest=digest,
                      wall_s=time.monotonic() - t0)

    @staticmethod
    def _rationale(stdout: Path) -> str:
        """The last non-empty stdout line (agents usually end with a summary), cut to 200 characters."""
        try:
            with open(stdout, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - STDERR_KEEP))
                lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        if not lines:
            return ""
        s = "".join(ch if ch.isprintable() else "?" for ch in lines[-1])
        return s[:200]


def _remove(path: Path) -> None:
    """Remove ``path`` even where the agent made folders unreadable or unwritable."""
    def onerror(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=onerror)
    else:  # pragma: no cover
        shutil.rmtree(path, onerror=onerror)
