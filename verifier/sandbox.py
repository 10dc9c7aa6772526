"""The job's sandbox: its environment allow-list and the bubblewrap command line (stdlib only).

The exec wrapper (:mod:`infrarsi.verifier.exec`) runs *outside* the sandbox and starts the untrusted job *inside*
it.  This module holds only pure functions plus one probe:

* :func:`job_env` -- the job's environment, built from an allow-list (launcher, CUDA/NCCL, torch, Slurm job
  geometry, locale) plus names the caller passes through explicitly; controller secrets (``INFRARSI_HOME``,
  ``INFRARSI_DATABASE_URL``, ``INFRARSI_KEY_FILE``, ``PG*``, cloud credentials, tokens) never pass, even when
  asked for.
* :func:`bwrap_argv` -- ``bwrap`` options that give the job new PID, IPC, UTS, cgroup, user and mount namespaces
  (``--unshare-all``: a private network namespace with only loopback, so a single-node job reaches no service of
  the host -- not the controller's database on 127.0.0.1, not the Slurm daemons -- while NCCL/gloo rendezvous on
  localhost between its own ranks still works; multi-node launches share the host's network, ``--share-net``),
  a read-only view of the system (``/usr``, ``/lib*``, ``/bin``, ``/sbin``, a minimal ``/etc``), the
  interpreter's prefixes, the installed ``infrarsi/verifier`` package folder (and nothing else of the infrarsi
  checkout), GPU device nodes when present, and read-write ``src/`` and ``scratch/``.  ``/tmp`` is a private
  tmpfs.  Paths the job must never see (the trial's ``out/``) are masked when they lie under a bound folder.
  When the job's main process exits, bwrap's PID-1 reaper exits and the kernel kills every process left in the
  PID namespace (``setsid`` and double-forked children included): this is the whole-trial kill.
* :func:`probe` -- whether bubblewrap is present and can create those namespaces here; the wrapper refuses to
  start a job (fail closed) when it cannot, unless isolation is explicitly ``none``.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

ISOLATION_MODES = ("bwrap", "none")
BWRAP_ENV = "INFRARSI_BWRAP"

#: variables passed through unchanged when present in the wrapper's environment
ALLOW_EXACT = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "NODE_RANK", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "INFRARSI_TRIAL_ID",
})
#: prefixes passed through (launcher, NCCL, CUDA, torch, Slurm job geometry, locale)
ALLOW_PREFIX = ("LC_", "NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "TORCHELASTIC_", "GLOO_", "OMP_", "KMP_", "SLURM_")
#: never passed, even when listed in ``passthrough`` (controller state and credentials)
DENY = re.compile(
    r"^(INFRARSI_(HOME|DATABASE_URL|KEY_FILE|SIGNING_KEY|CONFIG|SCRATCH|RECEIPT_PATH)|PG[A-Z_]*|AWS_.*|AZURE_.*"
    r"|GOOGLE_.*|GCP_.*|SLURM_JWT|.*(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL).*|SSH_AUTH_SOCK|DATABASE_URL)$",
    re.IGNORECASE)
#: the minimal /etc the job sees (name resolution, users, TLS roots, dynamic linker, time zone)
ETC_FILES = ("passwd", "group", "hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
             "protocols", "services", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "ssl",
             "ca-certificates", "ca-certificates.conf", "pki", "alternatives", "mime.types", "os-release",
             "machine-id", "nvidia", "OpenCL", "vulkan")


def allowed(name: str) -> bool:
    """Whether ``name`` may pass from the wrapper's environment into the job by the allow-list alone."""
    if DENY.match(name):
        return False
    return name in ALLOW_EXACT or name.startswith(ALLOW_PREFIX)


def job_env(source: Mapping[str, str], passthrough: Iterable[str] = (), overrides: Mapping[str, str] = ()
            ) -> dict[str, str]:
    """The job's environment: allow-listed names of ``source``, the ``passthrough`` names present in ``source``
    (the contract's ``launch.env``), then ``overrides`` (per-trial variables set by the wrapper).  Names matching
    :data:`DENY` are dropped from all three."""
    keep = set(passthrough)
    env = {k: v for k, v in source.items() if (allowed(k) or k in keep) and not DENY.match(k)}
    for k, v in dict(overrides).items():
        if not DENY.match(k):
            env[k] = v
    return env


def find_bwrap(environ: Mapping[str, str] | None = None) -> str | None:
    """Absolute path of bubblewrap: ``$INFRARSI_BWRAP`` when set (returned even if missing, so the error names
    it), else ``bwrap`` on ``PATH``; None when not found."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(BWRAP_ENV)
    if explicit:
        return explicit
    found = shutil.which("bwrap", path=environ.get("PATH") or os.defpath)
    return os.path.abspath(found) if found else None


def _verifier_dir() -> Path:
    """The installed ``infrarsi.verifier`` package folder (what the job imports the emitter from)."""
    spec = importlib.util.find_spec("infrarsi.verifier")
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parent
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def interpreter_paths() -> list[str]:
    """Read-only folders the job's interpreter needs: the prefixes and the site-packages of this python."""
    paths: list[str] = []
    cands = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent.parent)]
    try:
        cands += list(site.getsitepackages())
    except AttributeError:
        pass
    for p in cands:
        rp = os.path.realpath(p)
        if os.path.isdir(rp) and rp not in paths and rp != "/":
            paths.append(rp)
    return paths


def _system_binds() -> list[str]:
    args: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ETC_FILES:
        p = f"/etc/{name}"
        if os.path.lexists(p):
            args += ["--ro-bind-try", p, p]
    return args


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bwrap_argv(bwrap: str, *, src: str, scratch: str, cwd: str, env: Mapping[str, str],
               hide: Iterable[str] = (), extra_rw: Iterable[str] = (), tmp_size_bytes: int | None = None,
               multinode: bool = False, ro_binds: Iterable[tuple[str, str]] = ()) -> list[str]:
    """The bubblewrap command prefix (append ``["--", *argv]``) for a job with source tree ``src`` and
    ``scratch`` read-write, working directory ``cwd`` and environment exactly ``env``.

    ``hide``: paths that must stay invisible (``out/``, key files) -- masked by an empty tmpfs when they lie
    under ``src``/``scratch``, simply not bound otherwise.  ``extra_rw``: further read-write binds (the receipt
    FIFO's folder).  ``tmp_size_bytes``: size cap of the private ``/tmp``.  ``multinode``: share the host's network
    (ranks on other nodes) and bind the munge socket and ``/etc/slurm`` so ``srun`` works inside; otherwise the job
    gets a network namespace of its own with only loopback.  ``ro_binds``: ``(host path, path in the sandbox)``
    read-only binds of the contract's inputs, mounted after ``src`` so one may sit inside the source tree (a write
    there fails with ``EROFS``).
    """
    a: list[str] = [bwrap, "--unshare-all", *(["--share-net"] if multinode else []), "--die-with-parent", "--new-session",
                    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    if tmp_size_bytes:
        a += ["--size", str(int(tmp_size_bytes))]
    a += ["--tmpfs", "/tmp", "--ro-bind-try", "/sys", "/sys"]
    a += _system_binds()
    for p in interpreter_paths():
        a += ["--ro-bind", p, p]
    vdir = str(_verifier_dir())
    a += ["--ro-bind", vdir, vdir]
    for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
        a += ["--dev-bind", dev, dev]
    if multinode:
        a += ["--ro-bind-try", "/run/munge", "/run/munge", "--ro-bind-try", "/etc/slurm", "/etc/slurm"]
    rsrc, rscratch = os.path.realpath(src), os.path.realpath(scratch)
    a += ["--bind", rsrc, rsrc, "--bind", rscratch, rscratch]
    for p in extra_rw:
        rp = os.path.realpath(p)
        a += ["--bind", rp, rp]
    for host, dest in ro_binds:
        a += ["--ro-bind", os.path.realpath(host), dest]
    for h in hide:
        rh = os.path.realpath(h)
        if os.path.isdir(rh) and (_under(rh, rsrc) or _under(rh, rscratch)):
            a += ["--tmpfs", rh]
    a += ["--clearenv"]
    for k in sorted(env):
        a += ["--setenv", k, env[k]]
    a += ["--chdir", os.path.realpath(cwd)]
    return a


def probe(bwrap: str | None, timeout_s: float = 20.0) -> str | None:
    """None when ``bwrap`` can create the sandbox's namespaces here; otherwise a short reason."""
    if not bwrap:
        return "bwrap not found on PATH"
    if not os.path.isabs(bwrap):
        return f"{BWRAP_ENV}={bwrap} is not an absolute path"
    if not os.access(bwrap, os.X_OK):
        return f"{bwrap} does not exist or is not executable"
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--proc", "/proc", "--dev", "/dev",
           *_system_binds(), "--", "true"]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{bwrap}: {exc}"
    if cp.returncode != 0:
        msg = (cp.stderr or cp.stdout or "").strip().splitlines()
        return f"{bwrap}: {msg[-1] if msg else f'exit {cp.returncode}'}"
    return None


def version(bwrap: str) -> str:
    """``bubblewrap X.Y.Z`` (or ``bubblewrap``) for the receipt's isolation detail."""
    try:
        cp = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        return cp.stdout.strip() or "bubblewrap"
    except (OSError, subprocess.SubprocessError):
        return "bubblewrap"
