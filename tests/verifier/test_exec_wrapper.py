"""The exec wrapper as a real subprocess: key hygiene, clock stamps, exit codes, signals, timeout, error scan."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infrarsi.verifier import signing
from infrarsi.verifier.receipt import classify_outcome, load_receipt

MASTER = b"\x01" * 32


def wrap(tmp_path: Path, body: str, *opts: str, trial_id: str = "t1", key: bool = True,
         env: dict | None = None, timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """Run python code ``body`` under ``python -m infrarsi.verifier.exec``; returns (process, receipt dict, out dir)."""
    out = tmp_path / "out"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-m", "infrarsi.verifier.exec", "--trial-id", trial_id, "--out", str(out), "--quiet", *opts]
    if key:
        kf = tmp_path / "trial.key"
        signing.write_key_file(str(kf), signing.derive_trial_key(MASTER, trial_id))
        cmd += ["--key-file", str(kf)]
    proc = subprocess.run(cmd + ["--", sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          env=env, timeout=timeout)
    receipt = json.loads((out / "receipt.json").read_text())
    return proc, receipt, out


EMIT = """
import os, sys, time
from infrarsi.verifier.emit import Receipts
rx = Receipts.from_env()
"""


def test_key_file_deleted_before_the_child_and_key_not_in_its_env(tmp_path):
    env = dict(os.environ, INFRARSI_SIGNING_KEY="ab" * 16)
    proc, rec, out = wrap(tmp_path, """
        import os, pathlib
        print("KEYFILE", pathlib.Path("trial.key").exists())
        print("ENVKEY", "INFRARSI_SIGNING_KEY" in os.environ)
        print("ENVVALS", any("abab" in v for v in os.environ.values()))
    """, env=env)
    log = (out / "job.log").read_text()
    assert "KEYFILE False" in log and "ENVKEY False" in log and "ENVVALS False" in log
    assert not (tmp_path / "trial.key").exists()
    assert load_receipt((out / "receipt.json").read_bytes(), MASTER, "t1").trial_id == "t1"


def test_env_key_signs_when_no_key_file(tmp_path):
    trial_key = signing.derive_trial_key(MASTER, "t1")
    env = dict(os.environ, INFRARSI_SIGNING_KEY=trial_key.hex())
    proc, rec, out = wrap(tmp_path, "print('hi')", key=False, env=env)
    assert proc.returncode == 0
    load_receipt((out / "receipt.json").read_bytes(), MASTER, "t1")


def test_unsigned_without_any_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INFRARSI_SIGNING_KEY"}
    _, rec, _ = wrap(tmp_path, "pass", key=False, env=env)
    assert rec["signature"] is None


def test_lines_are_stamped_with_the_wrapper_clock(tmp_path):
    proc, rec, _ = wrap(tmp_path, EMIT + """
rx.header("md", 10, "fp32", 1, 64, 8)
for i in range(1, 5):
    time.sleep(0.25)
    rx.update(i, 2.0 / i, 1.0, 64, 8, 8, i, 0.1, "b%d" % i, 0.001)
rx.footer(4)
print("not a receipt line")
""")
    assert proc.returncode == 0
    assert rec["header"]["model_digest"] == "md" and rec["footer"]["completed"] == 4
    t = [u["wall_t"] for u in rec["updates"]]
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert all(0.1 <= g <= 2.0 for g in gaps), gaps          # wrapper clock, not the job's 0.001
    assert t[-1] - t[0] >= 0.7
    assert classify_outcome(load_receipt(json.dumps(rec).encode(), MASTER, "t1")) == "ok"
    assert rec["wrapper"]["wall_s"] >= t[-1]


def test_fifo_fallback_when_a_launcher_closes_descriptors(tmp_path):
    proc, rec, _ = wrap(tmp_path, """
import subprocess, sys
code = "from infrarsi.verifier.emit import Receipts; r = Receipts.from_env(); r.update(1, 1.0, 1.0, 1, 1, 1, 1, 0.1, 'x', 0.1); r.footer(1)"
subprocess.run([sys.executable, "-c", code], check=True)   # close_fds=True: the pipe fd is gone
""")
    assert proc.returncode == 0 and len(rec["updates"]) == 1 and rec["footer"]["completed"] == 1


def test_exit_code_is_propagated(tmp_path):
    proc, rec, _ = wrap(tmp_path, "import sys; sys.exit(3)")
    assert proc.returncode == 3 and rec["wrapper"]["exit_code"] == 3 and rec["wrapper"]["signal"] is None


def test_signal_gives_128_plus_signal(tmp_path):
    proc, rec, _ = wrap(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.returncode == 128 + 9
    assert rec["wrapper"]["signal"] == 9 and rec["wrapper"]["exit_code"] is None


def _alive_with(marker: str) -> list[int]:
    """Pids (in this PID namespace) whose command line contains ``marker``, zombies excluded."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker.encode() in (d / "cmdline").read_bytes() and (d / "stat").read_text().split(") ")[-1][0] != "Z":
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


def test_timeout_kills_the_process_group(tmp_path):
    marker = f"infrarsi-timeout-{os.getpid()}-{tmp_path.name}"
    proc, rec, out = wrap(tmp_path, f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
time.sleep(300)
""", "--timeout", "2")
    w = rec["wrapper"]
    assert w["timed_out"] is True and w["signal"] == 15 and proc.returncode == 128 + 15
    assert w["wall_s"] < 30
    assert _alive_with(marker) == []


def test_error_lines_and_oom_sizes_are_recorded(tmp_path):
    proc, rec, out = wrap(tmp_path, """
import sys
print("all good")
print("NCCL WARN NET/IB : Got completion with error 12", file=sys.stderr)
print("RuntimeError: CUDA error: device-side assert triggered", file=sys.stderr)
raise RuntimeError("CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.1 GiB of which 300.00 MiB is free.")
""")
    w = rec["wrapper"]
    kinds = [e["kind"] for e in w["errors"]]
    assert kinds[:3] == ["nccl", "cuda", "traceback"] and "oom" in kinds
    assert w["oom"] == {"requested_gib": pytest.approx(0.5), "free_gib": pytest.approx(300 / 1024)}
    assert proc.returncode == 1
    assert "all good" in (out / "job.log").read_text()


def test_frozen_files_hashed_before_and_after(tmp_path):
    (tmp_path / "cfg.json").write_text("{}")
    sha = hashlib.sha256(b"{}").hexdigest()
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"cfg.json": sha, "missing.py": "00"}))
    _, rec, _ = wrap(tmp_path, "open('cfg.json', 'a').write(' ')", "--frozen-manifest", str(manifest),
                     "--memory-cap-gib", "40")
    w = rec["wrapper"]
    assert w["frozen_before"] == {"cfg.json": sha, "missing.py": None}
    assert w["frozen_after"]["cfg.json"] == hashlib.sha256(b"{} ").hexdigest()
    assert w["memory_cap_gib"] == 40.0


def test_bad_key_file_is_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "infrarsi.verifier.exec", "--key-file", str(tmp_path / "nope"), "--out",
                           str(tmp_path), "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("infrarsi: error: --key-file")
    assert proc.stderr.count("\n") == 1
