"""Helpers for the sandbox attack tests: a trial laid out as ``trials/<key>/{src,scratch,out}``, the attack job
(one python script that tries every read and leaves a report), and the real exec wrapper as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from infrarsi.verifier import signing

MASTER = b"\x42" * 32
REPO = Path(__file__).resolve().parents[2]
SECRET_ENV = {
    "INFRARSI_DATABASE_URL": "postgresql://infrarsi:hunter2@127.0.0.1/infrarsi",
    "PGPASSWORD": "hunter2", "AWS_SECRET_ACCESS_KEY": "AKIAhunter2", "HF_TOKEN": "hf_hunter2",
    "INFRARSI_KEY_FILE": "/nonexistent/signing.key",
}


@dataclass
class Trial:
    """One trial's folders and its per-trial key file (in ``out/``)."""

    tid: str
    base: Path
    src: Path
    scratch: Path
    out: Path
    key: Path


def make_trial(root: Path, tid: str, master: bytes = MASTER) -> Trial:
    """``root/trials/<tid>/{src,scratch,out}`` with the derived key in ``out/trial.key``."""
    base = root / "trials" / tid
    src, scratch, out = base / "src", base / "scratch", base / "out"
    for d in (src, scratch, out):
        d.mkdir(parents=True, exist_ok=True)
    key = out / "trial.key"
    signing.write_key_file(str(key), signing.derive_trial_key(master, tid))
    return Trial(tid, base, src, scratch, out, key)


def make_home(root: Path) -> Path:
    """A controller state dir with a master key and a SQLite file, as ``INFRARSI_HOME`` would hold."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    signing.write_key_file(str(home / "signing.key"), MASTER)
    (home / "infrarsi.sqlite").write_bytes(b"SQLite format 3\x00secret rows")
    return home


#: the attack job: reads ``targets.json`` (in its cwd: a test-only file naming what it tries to read) and writes
#: ``report.json`` into its cwd: for each path, "read" or the errno name; the secrets it found in its env
ATTACK = textwrap.dedent("""
    import errno, json, os
    targets = json.load(open("targets.json"))
    report = {"paths": {}, "env": sorted(k for k in os.environ if k in targets["env"] or k == "INFRARSI_HOME"),
              "env_values": [k for k, v in os.environ.items() if any(s in v for s in targets["secrets"])]}
    for p in targets["paths"]:
        try:
            if os.path.isdir(p):
                os.listdir(p)
            else:
                open(p, "rb").read()
            report["paths"][p] = "read"
        except OSError as exc:
            report["paths"][p] = errno.errorcode.get(exc.errno, str(exc.errno))
    json.dump(report, open("report.json", "w"))
    print("attack report written")
""")


def write_attack(src: Path, paths: list[str]) -> None:
    """Put the attack job and its target list into ``src``."""
    (src / "attack.py").write_text(ATTACK)
    (src / "targets.json").write_text(json.dumps({"paths": paths, "env": sorted(SECRET_ENV),
                                                  "secrets": ["hunter2", MASTER.hex()]}))


#: the survivor: waits for receipt.json, halves every time in it, and stays around
SURVIVOR_CHILD = """
import json, sys, time
receipt = sys.argv[1]
for _ in range(600):
    try:
        r = json.load(open(receipt))
    except (OSError, ValueError):
        time.sleep(0.05)
        continue
    for u in r.get("updates") or []:
        u["wall_t"] = u["wall_t"] / 2
    r["wrapper"]["wall_s"] = r["wrapper"]["wall_s"] / 2
    r["tampered"] = True
    open(receipt, "w").write(json.dumps(r))
    break
time.sleep(300)
"""

#: a job that leaves a detached survivor (setsid + double fork) which waits for receipt.json and rewrites it;
#: ``job.py RECEIPT MARKER`` (the marker is in the survivor's command line)
SURVIVOR = f"""
import os, sys, time
receipt, marker = sys.argv[1], sys.argv[2]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp(sys.executable, [sys.executable, "-c", {SURVIVOR_CHILD!r}, receipt, marker])
    os._exit(0)
from infrarsi.verifier.emit import Receipts
rx = Receipts.from_env()
rx.header("md", 2, "fp32", 1, 64, 8)
for i in (1, 2):
    time.sleep(0.05)
    rx.update(i, 1.0, 1.0, 64, 8, 8, i, 0.1, "b%d" % i, 0.05)
rx.footer(2)
"""


def alive_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (zombies excluded)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker.encode() in (d / "cmdline").read_bytes() and (d / "stat").read_text().rsplit(") ", 1)[-1][0] != "Z":
                pids.append(int(d.name))
        except (OSError, IndexError):
            pass
    return pids


def wait_gone(marker: str, timeout: float = 10.0) -> list[int]:
    """Wait until no process carries ``marker``; the survivors left at the deadline."""
    deadline = time.monotonic() + timeout
    while alive_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive_with(marker)


def wrapper_cmd(t: Trial, *opts: str, cwd: Path | None = None) -> list[str]:
    """The real wrapper as the executors start it (``python -I -m``), for trial ``t``."""
    return [sys.executable, "-I", "-m", "infrarsi.verifier.exec", "--trial-id", t.tid, "--out", str(t.out),
            "--key-file", str(t.key), "--quiet", "--cwd", str(cwd or t.src), "--src", str(t.src),
            "--scratch", str(t.scratch), *opts]


def run_wrapper(t: Trial, job: list[str], *opts: str, env: dict[str, str] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``job`` under the real wrapper with cwd = ``t.src`` (like the executors)."""
    return subprocess.run([*wrapper_cmd(t, *opts), "--", *job], cwd=t.src, capture_output=True, text=True,
                          env=env if env is not None else dict(os.environ), timeout=timeout)
