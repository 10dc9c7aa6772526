"""The exec wrapper: run an untrusted training job in a sandbox and write a signed receipt of what it did.

``python -I -m infrarsi.verifier.exec [options] -- CMD ...`` (also ``infrarsi exec``).  The wrapper is trusted
code: it runs *outside* the sandbox (start it with ``-I`` so nothing in the job's tree can shadow it) and

* reads the signing key from ``--key-file`` (and deletes the file before the child starts) or from
  ``INFRARSI_SIGNING_KEY``; marks itself non-dumpable and a child subreaper;
* builds the job's environment from an allow-list (:func:`infrarsi.verifier.sandbox.job_env`; ``--pass-env``
  names the contract's own variables) with ``HOME``/``TMPDIR``/compile caches inside ``--scratch``;
* starts the job inside bubblewrap (``--isolation bwrap``, the default; :mod:`infrarsi.verifier.sandbox`):
  only ``--src`` and ``--scratch`` are writable, ``--out`` is invisible, the PID namespace takes every process of
  the job with it.  When bubblewrap is missing or cannot create namespaces it refuses to start (fail closed);
  ``--isolation none`` runs the job unsandboxed, warns on stderr and says so in the receipt;
* binds each ``--ro-input HOST DEST`` read-only at ``DEST`` (usually a mount point inside ``--src``; a write gets
  ``EROFS``); with ``--isolation none`` the empty mount point is replaced by a symlink to ``HOST`` instead;
* hashes the ``--frozen-manifest`` files in the child's cwd before and after the run;
* puts a copy of the receipt adapters first on the job's ``PYTHONPATH`` (:mod:`infrarsi.verifier.jobpath`), so
  the job imports them without infrarsi installed in its interpreter;
* gives the child a pipe (``INFRARSI_RECEIPT_FD``, plus a private FIFO for launchers that close inherited
  descriptors) and stamps every receipt line with its own monotonic clock (``wall_t``) as it arrives; at most
  ``--max-updates`` + 16 lines and (``--max-updates`` + 16) * 64 KiB are kept, the rest is counted and dropped;
* tees the child's combined stdout/stderr to its own stdout and ``--out/job.log``, keeping the first and last
  ``--log-keep-mib`` MiB of each with a marker line for what was dropped, recording CUDA/NCCL/traceback/OOM lines;
* samples the disk use of ``--src`` + ``--scratch`` every ~2 s and kills the job beyond ``--disk-limit-gib``;
* enforces ``--timeout`` by killing the child's process tree;
* writes ``--out/receipt.json`` (signed when a key was given) and exits with the child's status (128+signal).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from infrarsi.verifier import jobpath, sandbox, scan, signing
from infrarsi.verifier.receipt import SCHEMA

KEY_ENV = "INFRARSI_SIGNING_KEY"
MAX_LINE = 1 << 20
MAX_ERRORS = 200
#: receipt lines allowed beyond the expected updates (header, footer, slack)
RECEIPT_SLACK_LINES = 16
RECEIPT_LINE_BYTES = 64 * 1024
DEFAULT_LOG_KEEP = 4 << 20
GIB = 1 << 30


class WrapperError(Exception):
    """Bad wrapper input (missing command, unreadable key or manifest, no sandbox); one-line message."""


@dataclass
class ExecOptions:
    """What :func:`run_wrapped` needs; see the module docstring for the meaning of each.

    ``src``: the job's read-write source tree (default: ``cwd``); ``scratch``: its read-write scratch folder
    (default: a temporary folder removed afterwards); ``env``: the environment the allow-list is applied to
    (default: the wrapper's own); ``pass_env``: further names passed through from it.
    """

    argv: list[str]
    out_dir: Path
    trial_id: str = ""
    key_file: str | None = None
    timeout_s: float | None = None
    frozen_manifest: str | None = None
    memory_cap_gib: float | None = None
    cwd: str | None = None
    kill_grace_s: float = 5.0
    echo: bool = True
    env: dict[str, str] | None = None
    isolation: str = "bwrap"
    src: str | None = None
    scratch: str | None = None
    pass_env: list[str] = field(default_factory=list)
    max_updates: int | None = None
    disk_limit_gib: float | None = None
    disk_interval_s: float = 2.0
    log_keep_bytes: int = DEFAULT_LOG_KEEP
    #: ``(host path, path the job sees)`` read-only inputs (the contract's ``inputs:``)
    ro_inputs: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _State:
    t0: float = 0.0
    header: dict[str, Any] | None = None
    footer: dict[str, Any] | None = None
    updates: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    oom: dict[str, Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    max_lines: int | None = None
    max_bytes: int | None = None
    rx_lines: int = 0
    rx_bytes: int = 0
    lines_dropped: int = 0
    bytes_dropped: int = 0
    disk_used: int | None = None
    disk_exceeded: bool = False


HASH_CHUNK = 1 << 20
#: a frozen file that grew during the run is still hashed up to this size (forensics); beyond it, not read
GROWN_HASH_LIMIT = 64 << 20


def hash_file(root: Path, rel: str, expect_size: int | None = None) -> tuple[str | None, int | None]:
    """``(sha256 hex, size)`` of the regular file ``root/rel``, read without following links.

    The trial tree belongs to the job, so a frozen file may have been replaced by anything: a symlink (in any
    component of its path) to a secret or to ``/dev/zero``, a FIFO that blocks a reader, a sparse file of a
    terabyte.  None of them is read: a path through a link gives ``"symlink"``, anything but a regular file
    ``"not-a-regular-file"``, and a file grown past both ``expect_size`` (its size before the run) and
    :data:`GROWN_HASH_LIMIT` ``"size-changed:N"`` -- none of which equals a SHA-256, so ``frozen_files`` fails.  A missing file gives
    ``(None, None)``.
    """
    p = root
    try:
        for part in Path(rel).parts:
            p = p / part
            if stat.S_ISLNK(os.lstat(p).st_mode):
                return "symlink", None
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            return "not-a-regular-file", None
        if expect_size is not None and st.st_size > max(expect_size, GROWN_HASH_LIMIT):
            return f"size-changed:{st.st_size}", st.st_size
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            return "not-a-regular-file", None
        h, left = hashlib.sha256(), fst.st_size
        while left > 0:
            chunk = os.read(fd, min(HASH_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
        return h.hexdigest(), fst.st_size
    except OSError:
        return None, None
    finally:
        os.close(fd)


def hash_manifest(manifest: dict[str, str], root: Path,
                  sizes: dict[str, int | None] | None = None) -> dict[str, str | None]:
    """SHA-256 hex of each manifest path under ``root`` (``None`` when missing; see :func:`hash_file` for links,
    special and resized files).  ``sizes``: when given with entries, the sizes the files must still have (from the
    run before); when given empty, filled with the sizes found."""
    out: dict[str, str | None] = {}
    for rel in sorted(manifest):
        want = sizes.get(rel) if sizes else None
        digest, size = hash_file(root, rel, want)
        out[rel] = digest
        if sizes is not None and rel not in sizes:
            sizes[rel] = size
    return out


def _read_key(opts: ExecOptions) -> bytes | None:
    if opts.key_file:
        try:
            key = signing.read_key_file(opts.key_file)
        except (OSError, ValueError) as exc:
            raise WrapperError(f"--key-file {opts.key_file}: {exc}") from None
        try:
            os.unlink(opts.key_file)
        except OSError as exc:
            raise WrapperError(f"--key-file {opts.key_file}: cannot delete before starting the job ({exc.strerror})") from None
        return key
    env_key = os.environ.get(KEY_ENV)
    if not env_key:
        return None
    try:
        return signing.parse_key(env_key, KEY_ENV)
    except ValueError as exc:
        raise WrapperError(str(exc)) from None


def _harden() -> None:
    """Make this process non-dumpable (its /proc/<pid>/environ and memory, which hold the key, become
    unreadable to same-uid processes) and a child subreaper (orphans of the job -- ``setsid``, double fork --
    are re-parented here, so the end-of-run kill finds them even without a PID namespace).  Linux, best effort."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE = 4
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        pass


def _descendants(root: int) -> list[int]:
    """Live descendants of ``root`` by parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2:].split()
        if len(rest) > 1 and rest[0] not in ("Z", "X"):
            children.setdefault(int(rest[1]), []).append(int(entry))
    out: list[int] = []
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _signal_tree(pid: int, sig: int, spare: frozenset[int] = frozenset()) -> None:
    """``sig`` to the job's process group, and to every descendant of this wrapper but ``spare`` (those that
    existed before the job): the job's tree, whatever groups or sessions it made."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in _descendants(os.getpid()):
        if p in spare:
            continue
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


class _Capped:
    """Writes a byte stream to ``sinks`` keeping the first and last ``keep`` bytes; the middle is counted in
    ``dropped`` and replaced by one marker line at :meth:`close`.  Holds at most ``keep`` bytes in memory."""

    def __init__(self, sinks: list[BinaryIO], keep: int) -> None:
        self.sinks, self.keep = sinks, max(0, keep)
        self.head = 0
        self.tail = bytearray()
        self.dropped = 0

    def _emit(self, data: bytes) -> None:
        for s in self.sinks:
            try:
                s.write(data)
                s.flush()
            except (OSError, ValueError):
                pass

    def write(self, data: bytes) -> None:
        if self.head < self.keep:
            part = data[:self.keep - self.head]
            self._emit(part)
            self.head += len(part)
            data = data[len(part):]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                cut = len(self.tail) - self.keep
                self.dropped += cut
                del self.tail[:cut]

    def close(self) -> None:
        if self.dropped:
            self._emit(f"\n[infrarsi: {self.dropped} bytes of job output dropped here; kept the first and last "
                       f"{self.keep} bytes]\n".encode())
        if self.tail:
            self._emit(bytes(self.tail))
        self.tail = bytearray()


def _read_receipts(fh: BinaryIO, st: _State) -> None:
    for raw in iter(lambda: fh.readline(MAX_LINE), b""):
        now = time.monotonic() - st.t0
        with st.lock:
            over = (st.max_lines is not None and st.rx_lines >= st.max_lines) or \
                   (st.max_bytes is not None and st.rx_bytes + len(raw) > st.max_bytes)
            if over:
                st.lines_dropped += 1
                st.bytes_dropped += len(raw)
                continue
            st.rx_lines += 1
            st.rx_bytes += len(raw)
        try:
            obj = json.loads(raw.decode("utf-8"))
            if not isinstance(obj, dict):
                raise ValueError
        except ValueError:
            with st.lock:
                st.bad_lines += 1
            continue
        kind = obj.pop("kind", None)
        with st.lock:
            if kind == "update":
                obj["wall_t"] = round(now, 6)
                st.updates.append(obj)
            elif kind == "header" and st.header is None:
                obj["wall_t"] = round(now, 6)
                st.header = obj
            elif kind == "footer":
                obj["wall_t"] = round(now, 6)
                st.footer = obj
            else:
                st.bad_lines += 1


def _read_output(fh: BinaryIO, st: _State, out: _Capped) -> None:
    for raw in iter(lambda: fh.readline(MAX_LINE), b""):
        out.write(raw)
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        kind = scan.classify_line(line)
        if kind is None:
            continue
        with st.lock:
            entry = {"kind": kind, "line": line[:500], "t": round(time.monotonic() - st.t0, 6),
                     "after_updates": len(st.updates)}
            if len(st.errors) < MAX_ERRORS:
                st.errors.append(entry)
            if kind == "oom":
                parsed = scan.parse_oom(line)
                if st.oom is None or (st.oom.get("requested_gib") is None and parsed["requested_gib"] is not None):
                    st.oom = parsed


def disk_usage(paths: list[str]) -> int:
    """Bytes allocated under ``paths`` (st_blocks, symlinks not followed, each inode counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = list(paths)
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    stt = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (stt.st_dev, stt.st_ino) in seen:
                    continue
                seen.add((stt.st_dev, stt.st_ino))
                total += stt.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return total


def _watch_disk(paths: list[str], limit: int | None, interval: float, st: _State, done: threading.Event,
                kill: Any) -> None:
    while not done.wait(interval):
        used = disk_usage(paths)
        with st.lock:
            st.disk_used = max(st.disk_used or 0, used)
        if limit is not None and used > limit:
            with st.lock:
                st.disk_exceeded = True
            kill()
            return


def _isolation(opts: ExecOptions) -> tuple[str | None, dict[str, str]]:
    """``(bwrap path or None, the receipt's isolation block)``; raises WrapperError (fail closed)."""
    if opts.isolation not in sandbox.ISOLATION_MODES:
        raise WrapperError(f"--isolation {opts.isolation!r}: expected one of {', '.join(sandbox.ISOLATION_MODES)}")
    if opts.isolation == "none":
        print("infrarsi: warning: isolation disabled (--isolation none): the job runs unsandboxed and can read "
              "everything this user can; use only on a trusted single-user machine", file=sys.stderr, flush=True)
        return None, {"mode": "none", "detail": "disabled by --isolation none (INFRARSI_ISOLATION=none): "
                                                "the job ran without a sandbox"}
    bwrap = sandbox.find_bwrap(opts.env if opts.env is not None else os.environ)
    reason = sandbox.probe(bwrap)
    if reason is not None:
        raise WrapperError(f"isolation: bubblewrap {bwrap or ''} not available ({reason}); install bubblewrap "
                           "or set INFRARSI_ISOLATION=none on a trusted single-user machine".replace("  ", " "))
    assert bwrap is not None
    return bwrap, {"mode": "bwrap", "detail": f"{sandbox.version(bwrap)}: new pid, ipc, uts, cgroup, user and mount "
                                              "namespaces; network: own namespace (loopback only) unless the launch is multi-node; "
                                              "writable: src, scratch"}


def _under_or_over(a: str, b: str) -> bool:
    """Whether one of two resolved paths is, or lies under, the other."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def prepare_inputs(opts: ExecOptions, src: Path, scratch: Path | None, sandboxed: bool) -> list[tuple[str, str]]:
    """Check ``opts.ro_inputs`` and return the ``(host, dest)`` read-only binds (both resolved).

    WrapperError (one line) when an input is missing on this node (under Slurm: not on storage the compute node
    mounts), overlaps the trial's own ``out/``, ``src`` or ``scratch`` or the key file, or when the path to its mount
    point inside ``src`` passes through a symlink.  Unsandboxed (``sandboxed`` False), an empty mount point inside
    ``src`` is replaced by a symlink to the input (no copy), and an input outside ``src`` must be at its own path.
    """
    binds: list[tuple[str, str]] = []
    own = [str(opts.out_dir.resolve()), str(src), *([str(scratch)] if scratch else [])]
    if opts.key_file:
        own.append(os.path.realpath(opts.key_file))
    for host, dest in opts.ro_inputs:
        rhost = os.path.realpath(host)
        if not os.path.exists(rhost):
            raise WrapperError(f"--ro-input {host}: not found on this node (an input must be on storage the compute "
                               "nodes mount at the same path)")
        for p in own:
            if _under_or_over(rhost, p):
                raise WrapperError(f"--ro-input {host}: overlaps the trial's own {p}")
        if not os.path.isabs(dest):
            raise WrapperError(f"--ro-input {host} {dest}: the destination must be an absolute path")
        dest = os.path.normpath(dest)
        inside = dest.startswith(str(src).rstrip("/") + "/")
        if inside:
            p = src
            for part in Path(os.path.relpath(dest, src)).parts:
                p = p / part
                if os.path.islink(p):
                    raise WrapperError(f"--ro-input {host}: the mount point {dest} passes through the symlink {p}")
        if not sandboxed:
            if inside:
                if os.path.isdir(dest):
                    if os.listdir(dest):
                        raise WrapperError(f"--ro-input {host}: the mount point {dest} is not empty")
                    os.rmdir(dest)
                elif os.path.lexists(dest):
                    if os.path.getsize(dest):
                        raise WrapperError(f"--ro-input {host}: the mount point {dest} is not empty")
                    os.unlink(dest)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.symlink(rhost, dest)
            elif dest != rhost:
                raise WrapperError(f"--ro-input {host} {dest}: without a sandbox an input outside --src must be at "
                                   "its own path")
        binds.append((rhost, dest))
    return binds


def run_wrapped(opts: ExecOptions) -> int:
    """Run ``opts.argv`` under the wrapper; write the receipt and job log; return the exit status.

    Raises :class:`WrapperError` for bad inputs (and, fail closed, for an unavailable sandbox) before the child
    starts; nothing is written to ``--out`` then.
    """
    if not opts.argv:
        raise WrapperError("no command given after --")
    bwrap, iso = _isolation(opts)
    _harden()
    cwd = Path(opts.cwd or os.getcwd()).resolve()
    src = Path(opts.src).resolve() if opts.src else cwd
    if bwrap and cwd != src and src not in cwd.parents:
        raise WrapperError(f"--cwd {cwd}: not inside --src {src} (the job sees only src and scratch)")
    key = _read_key(opts)
    manifest: dict[str, str] = {}
    if opts.frozen_manifest:
        try:
            manifest = json.loads(Path(opts.frozen_manifest).read_text())
            assert isinstance(manifest, dict)
        except (OSError, ValueError, AssertionError):
            raise WrapperError(f"--frozen-manifest {opts.frozen_manifest}: not a readable JSON object of relpath: sha256") from None
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    frozen_sizes: dict[str, int | None] = {}
    frozen_before = hash_manifest(manifest, cwd, frozen_sizes)
    own_scratch = opts.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="infrarsi-scratch-") if own_scratch else opts.scratch).resolve()  # type: ignore[arg-type]
    for sub in ("home", "tmp", "cache"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    try:
        ro_binds = prepare_inputs(opts, src, scratch, sandboxed=bwrap is not None)
    except WrapperError:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        raise

    rfd, wfd = os.pipe()
    fifo_dir = tempfile.mkdtemp(prefix="infrarsi-rx-")
    fifo = os.path.join(fifo_dir, "receipts")
    os.mkfifo(fifo, 0o600)
    fifo_r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    fifo_keep = os.open(fifo, os.O_WRONLY)  # keeps readline blocking (not EOF) until the job is over
    os.set_blocking(fifo_r, True)
    overrides = {
        "INFRARSI_RECEIPT_FD": str(wfd), "INFRARSI_RECEIPT_INO": str(os.fstat(wfd).st_ino),
        "INFRARSI_RECEIPT_FIFO": fifo, "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "cache" / "torchinductor"),
        "TRITON_CACHE_DIR": str(scratch / "cache" / "triton"),
    }
    source = opts.env if opts.env is not None else dict(os.environ)
    env = sandbox.job_env(source, opts.pass_env, overrides)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # the receipt adapters, importable by the job's interpreter even where infrarsi is not installed (jobpath.py)
    env["PYTHONPATH"] = jobpath.job_pythonpath(jobpath.write_job_lib(Path(fifo_dir) / "py"), env.get("PYTHONPATH"))
    if opts.trial_id:
        env.setdefault("INFRARSI_TRIAL_ID", opts.trial_id)
    disk_limit = int(opts.disk_limit_gib * GIB) if opts.disk_limit_gib else None
    if bwrap:
        multinode = os.path.basename(opts.argv[0]) == "srun"
        argv = [*sandbox.bwrap_argv(bwrap, src=str(src), scratch=str(scratch), cwd=str(cwd), env=env,
                                    hide=[str(opts.out_dir.resolve())], extra_rw=[fifo_dir],
                                    tmp_size_bytes=disk_limit, multinode=multinode, ro_binds=ro_binds),
                "--", *opts.argv]
    else:
        argv = list(opts.argv)
    st = _State()
    if opts.max_updates is not None:
        st.max_lines = int(opts.max_updates) + RECEIPT_SLACK_LINES
        st.max_bytes = st.max_lines * RECEIPT_LINE_BYTES
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    log = open(opts.out_dir / "job.log", "wb")
    sinks: list[BinaryIO] = [log]
    if opts.echo:
        sinks.append(sys.stdout.buffer)
    capped = _Capped(sinks, opts.log_keep_bytes)
    start_unix = time.time()
    spare = frozenset(_descendants(os.getpid()))
    st.t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=str(cwd), env=env, pass_fds=(wfd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        for fd in (rfd, wfd, fifo_r, fifo_keep):
            os.close(fd)
        shutil.rmtree(fifo_dir, ignore_errors=True)
        log.close()
        raise WrapperError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
    os.close(wfd)
    rx_thread = threading.Thread(target=_read_receipts, args=(os.fdopen(rfd, "rb"), st), daemon=True)
    out_thread = threading.Thread(target=_read_output, args=(proc.stdout, st, capped), daemon=True)
    fifo_thread = threading.Thread(target=_read_receipts, args=(os.fdopen(fifo_r, "rb"), st), daemon=True)
    disk_done = threading.Event()
    disk_paths = [str(src)] + ([str(scratch)] if src not in (scratch, *scratch.parents) else [])
    disk_thread = threading.Thread(target=_watch_disk, daemon=True, args=(
        disk_paths, disk_limit, opts.disk_interval_s, st, disk_done, lambda: _signal_tree(proc.pid, signal.SIGKILL, spare)))
    for th in (rx_thread, out_thread, fifo_thread, disk_thread):
        th.start()

    forwarded: list[int] = []

    def _forward(signum: int, _frame: Any) -> None:
        forwarded.append(signum)
        _signal_tree(proc.pid, signum, spare)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            old[s] = signal.signal(s, _forward)
    timed_out = False
    try:
        try:
            proc.wait(timeout=opts.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_tree(proc.pid, signal.SIGTERM, spare)
            try:
                proc.wait(timeout=opts.kill_grace_s)
            except subprocess.TimeoutExpired:
                _signal_tree(proc.pid, signal.SIGKILL, spare)
                proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    wall_s = time.monotonic() - st.t0
    end_unix = time.time()
    disk_done.set()
    _signal_tree(proc.pid, signal.SIGKILL, spare)  # leftovers (setsid, double fork) must not keep writing
    os.close(fifo_keep)
    rx_thread.join(timeout=5)
    out_thread.join(timeout=5)
    fifo_thread.join(timeout=5)
    disk_thread.join(timeout=5)
    capped.close()
    shutil.rmtree(fifo_dir, ignore_errors=True)
    log.close()
    used = disk_usage(disk_paths)
    frozen_after = hash_manifest(manifest, cwd, frozen_sizes)
    if own_scratch:
        shutil.rmtree(scratch, ignore_errors=True)

    rc = proc.returncode
    sig = -rc if rc < 0 else None
    if bwrap and sig is None and 128 < rc < 128 + 65:
        sig = rc - 128  # bwrap reports a signalled job as 128+signal (a job's own exit(129..192) reads the same)
    exit_status = 128 + sig if sig else rc
    with st.lock:
        receipt: dict[str, Any] = {
            "schema": SCHEMA,
            "trial_id": opts.trial_id,
            "header": st.header,
            "updates": list(st.updates),
            "footer": st.footer,
            "wrapper": {
                "exit_code": rc if sig is None else None,
                "signal": sig,
                "timed_out": timed_out,
                "wall_s": round(wall_s, 6),
                "started_at": started_at,
                "clock": {"start_unix": round(start_unix, 6), "end_unix": round(end_unix, 6)},
                "isolation": iso,
                "limits": {
                    "max_receipt_lines": st.max_lines, "max_receipt_bytes": st.max_bytes,
                    "receipt_lines_dropped": st.lines_dropped, "receipt_bytes_dropped": st.bytes_dropped,
                    "log_bytes_dropped": capped.dropped, "disk_limit_bytes": disk_limit,
                    "disk_used_bytes": max(used, st.disk_used or 0), "disk_exceeded": st.disk_exceeded,
                },
                "oom": st.oom,
                "errors": list(st.errors),
                "bad_lines": st.bad_lines,
                "frozen_manifest": manifest,
                "frozen_before": frozen_before,
                "frozen_after": frozen_after,
                "memory_cap_gib": opts.memory_cap_gib,
                "argv": list(opts.argv),
                "forwarded_signals": forwarded,
            },
        }
    receipt["signature"] = signing.sign(receipt, key) if key else None
    tmp = opts.out_dir / "receipt.json.tmp"
    tmp.write_text(json.dumps(receipt, sort_keys=True, indent=1, ensure_ascii=False))
    os.replace(tmp, opts.out_dir / "receipt.json")
    return exit_status


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m infrarsi.verifier.exec`` argument parser."""
    p = argparse.ArgumentParser(prog="python -I -m infrarsi.verifier.exec", description=__doc__.splitlines()[0])
    p.add_argument("--trial-id", default="")
    p.add_argument("--out", default=".", help="directory for receipt.json and job.log (never visible to the job)")
    p.add_argument("--key-file")
    p.add_argument("--timeout", type=float)
    p.add_argument("--frozen-manifest")
    p.add_argument("--memory-cap-gib", type=float)
    p.add_argument("--cwd", help="the job's working directory (inside --src; default: the current one)")
    p.add_argument("--src", help="the job's read-write source tree (default: --cwd)")
    p.add_argument("--scratch", help="the job's read-write scratch folder: HOME, TMPDIR, caches (default: temporary)")
    p.add_argument("--isolation", default="bwrap", choices=sandbox.ISOLATION_MODES)
    p.add_argument("--pass-env", action="append", default=[],
                   help="comma-separated variable names passed to the job besides the allow-list")
    p.add_argument("--max-updates", type=int, help="expected updates: receipt lines beyond N+16 are dropped")
    p.add_argument("--disk-limit-gib", type=float, help="kill the job when src + scratch exceed this")
    p.add_argument("--log-keep-mib", type=float, default=DEFAULT_LOG_KEEP / (1 << 20),
                   help="job.log and the echo keep the first and last this many MiB")
    p.add_argument("--ro-input", nargs=2, action="append", default=[], metavar=("HOST", "DEST"),
                   help="bind HOST read-only at DEST (a mount point inside --src); repeatable")
    p.add_argument("--quiet", action="store_true", help="do not echo the job's output")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -I -m infrarsi.verifier.exec``; returns the child's exit status (2 on bad input)."""
    ns = build_parser().parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    names = [n for item in ns.pass_env for n in item.split(",") if n]
    opts = ExecOptions(argv=cmd, out_dir=Path(ns.out), trial_id=ns.trial_id, key_file=ns.key_file,
                       timeout_s=ns.timeout, frozen_manifest=ns.frozen_manifest,
                       memory_cap_gib=ns.memory_cap_gib, cwd=ns.cwd, echo=not ns.quiet, isolation=ns.isolation,
                       src=ns.src, scratch=ns.scratch, pass_env=names, max_updates=ns.max_updates,
                       disk_limit_gib=ns.disk_limit_gib, log_keep_bytes=int(ns.log_keep_mib * (1 << 20)),
                       ro_inputs=[(h, d) for h, d in ns.ro_input])
    try:
        return run_wrapped(opts)
    except WrapperError as exc:
        print(f"infrarsi: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
