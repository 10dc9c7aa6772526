"""The exec wrapper: run an untrusted training job and write a signed receipt of what it did.

``python -m infrarsi.verifier.exec [options] -- CMD ...`` (also ``infrarsi exec``).  The wrapper

* reads the signing key from ``--key-file`` (and deletes the file before the child
  starts) or from ``INFRARSI_SIGNING_KEY``, which is removed from the child's environment;
* hashes the ``--frozen-manifest`` files in the child's cwd before and after the run;
* gives the child a pipe (``INFRARSI_RECEIPT_FD``, plus a private FIFO for launchers
  that close inherited descriptors) and stamps every receipt line with
  its own monotonic clock (``wall_t``, seconds since the child started) as it arrives;
* tees the child's combined stdout/stderr to its own stdout and ``--out/job.log``,
  recording CUDA/NCCL/traceback/OOM lines;
* enforces ``--timeout`` by killing the child's process group;
* writes ``--out/receipt.json`` (signed when a key was given) and exits with the
  child's status (128+signal when signalled).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from infrarsi.verifier import scan, signing
from infrarsi.verifier.receipt import SCHEMA

KEY_ENV = "INFRARSI_SIGNING_KEY"
MAX_LINE = 1 << 20
MAX_ERRORS = 200


class WrapperError(Exception):
    """Bad wrapper input (missing command, unreadable key or manifest); one-line message."""


@dataclass
class ExecOptions:
    """What :func:`run_wrapped` needs; see the module docstring for the meaning of each."""

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


def hash_manifest(manifest: dict[str, str], root: Path) -> dict[str, str | None]:
    """SHA-256 hex of each manifest path under ``root`` (``None`` when the file is missing)."""
    out: dict[str, str | None] = {}
    for rel in sorted(manifest):
        p = root / rel
        try:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError:
            out[rel] = None
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
    """Make this process non-dumpable (Linux): its /proc/<pid>/environ and memory, which hold
    the key, become unreadable to the job's same-uid processes.  Best effort; execve resets
    the flag for the child itself."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _read_receipts(fh: BinaryIO, st: _State) -> None:
    for raw in iter(lambda: fh.readline(MAX_LINE), b""):
        now = time.monotonic() - st.t0
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


def _read_output(fh: BinaryIO, st: _State, log: BinaryIO, echo: bool) -> None:
    for raw in iter(lambda: fh.readline(MAX_LINE), b""):
        log.write(raw)
        log.flush()
        if echo:
            try:
                sys.stdout.buffer.write(raw)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
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


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_wrapped(opts: ExecOptions) -> int:
    """Run ``opts.argv`` under the wrapper; write the receipt and job log; return the exit status.

    Raises :class:`WrapperError` for bad inputs before the child starts.
    """
    if not opts.argv:
        raise WrapperError("no command given after --")
    _harden()
    key = _read_key(opts)
    cwd = Path(opts.cwd or os.getcwd())
    manifest: dict[str, str] = {}
    if opts.frozen_manifest:
        try:
            manifest = json.loads(Path(opts.frozen_manifest).read_text())
            assert isinstance(manifest, dict)
        except (OSError, ValueError, AssertionError):
            raise WrapperError(f"--frozen-manifest {opts.frozen_manifest}: not a readable JSON object of relpath: sha256") from None
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    frozen_before = hash_manifest(manifest, cwd)

    env = dict(opts.env if opts.env is not None else os.environ)
    env.pop(KEY_ENV, None)
    env.pop("INFRARSI_RECEIPT_PATH", None)
    rfd, wfd = os.pipe()
    env["INFRARSI_RECEIPT_FD"] = str(wfd)
    env["INFRARSI_RECEIPT_INO"] = str(os.fstat(wfd).st_ino)
    fifo_dir = tempfile.mkdtemp(prefix="infrarsi-rx-")
    fifo = os.path.join(fifo_dir, "receipts")
    os.mkfifo(fifo, 0o600)
    fifo_r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    fifo_keep = os.open(fifo, os.O_WRONLY)  # keeps readline blocking (not EOF) until the job is over
    os.set_blocking(fifo_r, True)
    env["INFRARSI_RECEIPT_FIFO"] = fifo
    env.setdefault("PYTHONUNBUFFERED", "1")
    st = _State()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    log = open(opts.out_dir / "job.log", "wb")
    st.t0 = time.monotonic()
    try:
        proc = subprocess.Popen(opts.argv, cwd=str(cwd), env=env, pass_fds=(wfd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        for fd in (rfd, wfd, fifo_r, fifo_keep):
            os.close(fd)
        shutil.rmtree(fifo_dir, ignore_errors=True)
        log.close()
        raise WrapperError(f"cannot start {opts.argv[0]!r}: {exc.strerror}") from None
    os.close(wfd)
    rx_thread = threading.Thread(target=_read_receipts, args=(os.fdopen(rfd, "rb"), st), daemon=True)
    out_thread = threading.Thread(target=_read_output, args=(proc.stdout, st, log, opts.echo), daemon=True)
    fifo_thread = threading.Thread(target=_read_receipts, args=(os.fdopen(fifo_r, "rb"), st), daemon=True)
    rx_thread.start()
    out_thread.start()
    fifo_thread.start()

    forwarded: list[int] = []

    def _forward(signum: int, _frame: Any) -> None:
        forwarded.append(signum)
        _kill_group(proc.pid, signum)

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
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=opts.kill_grace_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    wall_s = time.monotonic() - st.t0
    _kill_group(proc.pid, signal.SIGKILL)  # leftovers in the job's group must not keep writing
    os.close(fifo_keep)
    rx_thread.join(timeout=5)
    out_thread.join(timeout=5)
    fifo_thread.join(timeout=5)
    shutil.rmtree(fifo_dir, ignore_errors=True)
    log.close()
    frozen_after = hash_manifest(manifest, cwd)

    rc = proc.returncode
    sig = -rc if rc < 0 else None
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
    p = argparse.ArgumentParser(prog="python -m infrarsi.verifier.exec", description=__doc__.splitlines()[0])
    p.add_argument("--trial-id", default="")
    p.add_argument("--out", default=".", help="directory for receipt.json and job.log")
    p.add_argument("--key-file")
    p.add_argument("--timeout", type=float)
    p.add_argument("--frozen-manifest")
    p.add_argument("--memory-cap-gib", type=float)
    p.add_argument("--cwd")
    p.add_argument("--quiet", action="store_true", help="do not echo the job's output")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m infrarsi.verifier.exec``; returns the child's exit status (2 on bad input)."""
    ns = build_parser().parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    opts = ExecOptions(argv=cmd, out_dir=Path(ns.out), trial_id=ns.trial_id, key_file=ns.key_file,
                       timeout_s=ns.timeout, frozen_manifest=ns.frozen_manifest,
                       memory_cap_gib=ns.memory_cap_gib, cwd=ns.cwd, echo=not ns.quiet)
    try:
        return run_wrapped(opts)
    except WrapperError as exc:
        print(f"infrarsi: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
