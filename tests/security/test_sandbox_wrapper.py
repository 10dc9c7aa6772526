"""Attacks on the exec wrapper itself (real bwrap, real wrapper subprocess): each one succeeded before the job ran
inside a sandbox with an allow-listed environment."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from infrarsi.verifier.receipt import load_receipt
from tests.security.sandbox_helpers import (MASTER, REPO, SECRET_ENV, SURVIVOR, make_home, make_trial, run_wrapper,
                                            wait_gone, write_attack)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (deploy/test.sh installs it)")
PY = sys.executable


def test_job_cannot_read_master_key_db_out_other_trials_or_the_repo(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    a, b = make_trial(tmp_path, "trial-a"), make_trial(tmp_path, "trial-b")
    (b.out / "receipt.json").write_text("{}")
    (b.src / "model.py").write_text("secret patch")
    (a.out / "frozen.json").write_text("{}")
    targets = [str(home / "signing.key"), str(home / "infrarsi.sqlite"), str(home), str(a.out),
               str(a.out / "frozen.json"), str(a.key), str(b.out / "receipt.json"), str(b.src / "model.py"),
               str(b.scratch), str(REPO / "controller" / "settings.py"), str(REPO / ".git" / "config")]
    write_attack(a.src, targets)
    env = dict(os.environ, INFRARSI_HOME=str(home), **SECRET_ENV)
    proc = run_wrapper(a, [PY, "attack.py"], env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((a.src / "report.json").read_text())
    assert report["paths"] == {p: "ENOENT" for p in targets}, report
    assert report["env"] == [] and report["env_values"] == []
    rec = load_receipt((a.out / "receipt.json").read_bytes(), MASTER, "trial-a")
    assert rec.data["wrapper"]["isolation"]["mode"] == "bwrap"


def test_job_can_import_the_emitter_and_write_src_and_scratch(tmp_path: Path) -> None:
    t = make_trial(tmp_path, "ok")
    (t.src / "job.py").write_text(
        "import os, pathlib\nfrom infrarsi.verifier.emit import Receipts\n"
        "pathlib.Path('written.txt').write_text('x')\n"
        "pathlib.Path(os.environ['HOME'], 'h.txt').write_text('y')\n"
        "print('HOME', os.environ['HOME'], 'TMP', os.environ['TMPDIR'])\n")
    proc = run_wrapper(t, [PY, "job.py"])
    assert proc.returncode == 0, (t.out / "job.log").read_text()
    assert (t.src / "written.txt").exists() and (t.scratch / "home" / "h.txt").exists()


def test_single_node_job_reaches_no_service_of_the_host(tmp_path: Path) -> None:
    """The controller's database listens on 127.0.0.1 (trust auth on many installs): a job with the host's network
    could rewrite any row without a password.  A single-node job gets its own network namespace (loopback only)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        t = make_trial(tmp_path, "net")
        (t.src / "job.py").write_text(
            "import socket, sys\n"
            "try:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n    print('REACHED')\n"
            "except OSError as e:\n    print('refused', e)\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"  # loopback itself works (rendezvous)
            "c = socket.create_connection(s.getsockname(), timeout=3); print('LOOPBACK OK')\n")
        proc = run_wrapper(t, [PY, "job.py", str(port)])
        log = (t.out / "job.log").read_text()
        assert proc.returncode == 0, log
        assert "REACHED" not in log and "refused" in log and "LOOPBACK OK" in log, log
    finally:
        server.close()


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_detached_survivor_cannot_rewrite_the_receipt(tmp_path: Path, isolation: str) -> None:
    t = make_trial(tmp_path, f"surv-{isolation}")
    marker = f"infrarsi-survivor-{os.getpid()}-{isolation}-{tmp_path.name}"
    (t.src / "job.py").write_text(SURVIVOR)
    proc = run_wrapper(t, [PY, "job.py", str(t.out / "receipt.json"), marker], "--isolation", isolation)
    assert proc.returncode == 0, (t.out / "job.log").read_text()
    assert wait_gone(marker, 5.0) == []   # nobody is left to wait for the receipt
    raw = (t.out / "receipt.json").read_bytes()
    rec = load_receipt(raw, MASTER, t.tid)   # exactly what the wrapper signed
    assert "tampered" not in json.loads(raw) and len(rec.updates) == 2
    assert rec.data["wrapper"]["isolation"]["mode"] == isolation


def test_fail_closed_when_bwrap_is_missing(tmp_path: Path) -> None:
    for env in (dict(os.environ, INFRARSI_BWRAP="/nonexistent/bwrap"),
                dict(os.environ, PATH=str(Path(PY).parent))):   # a PATH without bwrap
        t = make_trial(tmp_path, "closed")
        (t.src / "job.py").write_text("open('ran', 'w').write('1')\n")
        proc = run_wrapper(t, [PY, "job.py"], env=env)
        assert proc.returncode == 2
        assert proc.stderr.startswith("infrarsi: error: isolation: bubblewrap") and proc.stderr.count("\n") == 1
        assert "install bubblewrap or set INFRARSI_ISOLATION=none" in proc.stderr
        assert not (t.src / "ran").exists() and not (t.out / "receipt.json").exists()
        assert t.key.exists()  # nothing consumed: the executor may retry once bubblewrap is installed
        shutil.rmtree(t.base)


def test_opt_out_is_loud_and_recorded(tmp_path: Path) -> None:
    t = make_trial(tmp_path, "optout")
    proc = run_wrapper(t, [PY, "-c", "print('hi')"], "--isolation", "none",
                       env=dict(os.environ, INFRARSI_BWRAP="/nonexistent/bwrap"))
    assert proc.returncode == 0
    assert "infrarsi: warning: isolation disabled" in proc.stderr
    rec = load_receipt((t.out / "receipt.json").read_bytes(), MASTER, t.tid)
    assert rec.data["wrapper"]["isolation"]["mode"] == "none"


def test_trial_tree_cannot_shadow_the_wrapper(tmp_path: Path) -> None:
    t = make_trial(tmp_path, "shadow")
    evil = "print('PWNED-WRAPPER')\nraise SystemExit(0)\n"
    for pkg in ("infrarsi/verifier", "verifier"):
        d = t.src / pkg
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("print('PWNED-PACKAGE')\n")
        (d / "exec.py").write_text(evil)
    (t.src / "infrarsi" / "__init__.py").write_text("print('PWNED-PACKAGE')\n")
    env = dict(os.environ, PYTHONPATH=str(t.src))
    proc = run_wrapper(t, [PY, "-c", "print('job ran')"], env=env)
    assert "PWNED" not in proc.stdout + proc.stderr
    rec = load_receipt((t.out / "receipt.json").read_bytes(), MASTER, t.tid)
    assert rec.data["wrapper"]["exit_code"] == 0 and "job ran" in (t.out / "job.log").read_text()


def test_receipt_lines_log_and_disk_are_capped(tmp_path: Path) -> None:
    t = make_trial(tmp_path, "caps")
    (t.src / "job.py").write_text(
        "import os, sys, time\nfrom infrarsi.verifier.emit import Receipts\nrx = Receipts.from_env()\n"
        "rx.header('md', 3, 'fp32', 1, 64, 8)\n"
        "for i in range(1, 201):\n    rx.update(i, 1.0, 1.0, 64, 8, 8, i, 0.1, 'b', 0.01)\n"
        "for _ in range(20000):\n    sys.stdout.write('y' * 99 + '\\n')\n"
        "sys.stdout.flush()\n"
        "with open(os.path.join(os.environ['HOME'], 'fill'), 'wb') as f:\n"
        "    for _ in range(64):\n        f.write(b'z' * (1 << 20)); f.flush(); time.sleep(0.05)\n"
        "time.sleep(30)\n")
    proc = run_wrapper(t, [PY, "job.py"], "--max-updates", "3", "--log-keep-mib", "0.0625",
                       "--disk-limit-gib", str(16 / 1024), timeout=120)
    rec = load_receipt((t.out / "receipt.json").read_bytes(), MASTER, t.tid)
    lim = rec.data["wrapper"]["limits"]
    assert lim["max_receipt_lines"] == 19 and lim["max_receipt_bytes"] == 19 * 64 * 1024
    assert len(rec.updates) == 18 and lim["receipt_lines_dropped"] == 201 - 19 and lim["receipt_bytes_dropped"] > 0
    assert lim["log_bytes_dropped"] > 20000 * 100 - 3 * 65536
    log = (t.out / "job.log").read_bytes()
    assert len(log) < 3 * 65536 and b"bytes of job output dropped here" in log
    assert lim["disk_exceeded"] is True and lim["disk_used_bytes"] > 16 << 20
    assert rec.data["wrapper"]["signal"] == 9 and rec.data["wrapper"]["wall_s"] < 25
    clock = rec.data["wrapper"]["clock"]
    assert 0 < clock["end_unix"] - clock["start_unix"] < rec.data["wrapper"]["wall_s"] + 1


@pytest.mark.parametrize("swap", ["symlink_to_dev_zero", "symlink_to_secret", "fifo", "sparse_terabyte", "dir_link"])
def test_frozen_file_swapped_for_a_trap_is_never_read(tmp_path: Path, swap: str) -> None:
    """The wrapper hashes the frozen files in the job's tree after the run, as a trusted process outside the
    sandbox.  A job that swaps a frozen file for a link to /dev/zero, a FIFO or a sparse terabyte file would hang
    the wrapper or exhaust its memory (and a link to a secret would make it read one): none is read, the hash says
    what it was, and frozen_files fails."""
    import hashlib

    t = make_trial(tmp_path, f"frozen-{swap}")
    (t.src / "data").mkdir()
    frozen = t.src / "data" / "frozen.py"
    frozen.write_text("FROZEN = 1\n")
    manifest = {"data/frozen.py": hashlib.sha256(frozen.read_bytes()).hexdigest()}
    (t.out / "frozen.json").write_text(json.dumps(manifest))
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the job")
    trap = {
        "symlink_to_dev_zero": "os.symlink('/dev/zero', p)",
        "symlink_to_secret": f"os.symlink({str(secret)!r}, p)",
        "fifo": "os.mkfifo(p)",
        "sparse_terabyte": "f = open(p, 'wb'); f.truncate(1 << 40); f.close()",
        "dir_link": "import shutil; shutil.rmtree('data'); os.symlink('/dev', 'data')",
    }[swap]
    (t.src / "job.py").write_text(f"import os\np = 'data/frozen.py'\nos.unlink(p)\n{trap}\n")
    proc = run_wrapper(t, [PY, "job.py"], "--frozen-manifest", str(t.out / "frozen.json"), timeout=60)
    assert proc.returncode == 0, (t.out / "job.log").read_text()
    rec = load_receipt((t.out / "receipt.json").read_bytes(), MASTER, t.tid)
    after = rec.data["wrapper"]["frozen_after"]["data/frozen.py"]
    assert rec.data["wrapper"]["frozen_before"]["data/frozen.py"] == manifest["data/frozen.py"]
    assert after in {"symlink", "not-a-regular-file"} or str(after).startswith("size-changed:"), after
    from infrarsi.verifier.invariants import frozen_files
    from infrarsi.verifier.spec import JudgeSpec

    item = frozen_files(rec, [], JudgeSpec(updates=1, window=(1, 1), tokens_per_update=1, seq_len=1,
                                            frozen_manifest=manifest))
    assert item.status == "fail" and "changed during the run" in item.reason
