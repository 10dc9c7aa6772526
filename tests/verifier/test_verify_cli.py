"""``infrarsi exec`` and ``infrarsi verify`` end to end through the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from infrarsi.verifier import signing
from verifier_receipts import receipt_dict

MASTER = b"\x07" * 32
JOB = """
import sys, time
from infrarsi.verifier.emit import Receipts
loss_scale = float(sys.argv[1])
rx = Receipts.from_env()
rx.header("md", 10, "fp32", 1, 64, 8)
t = time.perf_counter()
for i in range(1, 7):  # timed loop to loop, as the adapters do: a stall between updates is on both clocks
    time.sleep(0.05)
    now = time.perf_counter()
    rx.update(i, loss_scale * 3.0 / i, 1.0 / i, 64, 8, 8, i, 0.1, "b%d" % i, now - t)
    t = now
rx.footer(6)
"""


def _infrarsi(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Receipts of three real wrapped runs: ref, same (accepted), lossy (loss x1.5)."""
    root = tmp_path_factory.mktemp("cli")
    (root / "job.py").write_text(JOB)
    signing.write_key_file(str(root / "master.key"), MASTER)
    out = {}
    for name, scale in (("ref", "1.0"), ("same", "1.0"), ("lossy", "1.5")):
        kf = root / f"{name}.key"
        signing.write_key_file(str(kf), signing.derive_trial_key(MASTER, name))
        p = _infrarsi("exec", "--trial-id", name, "--out", str(root / name), "--key-file", str(kf), "--quiet", "--",
                      sys.executable, str(root / "job.py"), scale, cwd=root)   # the sandbox shows the job its cwd
        assert p.returncode == 0, p.stderr
        out[name] = root / name / "receipt.json"
    out["key"] = root / "master.key"
    return out


def _verify(runs, name: str, trial_id: str | None = None, *extra: str) -> subprocess.CompletedProcess:
    return _infrarsi("verify", str(runs[name]), "--reference", str(runs["ref"]), "--key-file", str(runs["key"]),
                     "--trial-id", trial_id or name, "--updates", "6", "--window", "2:6", *extra)


def test_exec_propagates_the_exit_status(tmp_path):
    p = _infrarsi("exec", "--out", str(tmp_path), "--quiet", "--", sys.executable, "-c", "import sys; sys.exit(5)")
    assert p.returncode == 5 and json.loads((tmp_path / "receipt.json").read_text())["wrapper"]["exit_code"] == 5


def test_verify_accepts_and_prints_the_table(runs):
    p = _verify(runs, "same")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = p.stdout.splitlines()
    assert rows[0].split() == ["layer", "invariant", "status", "req", "reason"]
    assert len(rows) == 1 + 18 + 1 and rows[-1] == "accepted"


def test_verify_rejects_naming_the_invariant(runs):
    p = _verify(runs, "lossy")
    assert p.returncode == 1
    assert p.stdout.splitlines()[-1].startswith("rejected at L4 loss_within_tolerance: ")
    j = _verify(runs, "lossy", None, "--json")
    assert json.loads(j.stdout)["first_failed_layer"] == "L4"


def test_verify_rejects_a_replayed_receipt(runs):
    p = _verify(runs, "same", "another-trial")
    assert p.returncode == 1 and "rejected at L0 signature: replayed" in p.stdout


def test_verify_usage_errors_are_one_line(runs, tmp_path):
    p = _infrarsi("verify", str(runs["same"]), "--reference", str(runs["ref"]), "--trial-id", "same", "--updates", "6")
    assert p.returncode == 2 and p.stderr.strip().startswith("infrarsi: error: --key-file")
    p = _verify(runs, "same", None, "--window", "9")
    assert p.returncode == 2 and "--window" in p.stderr and p.stderr.count("\n") == 1


def test_rejudge_prints_counts(monkeypatch):
    import infrarsi.controller.cli.verify_cmd as vc
    from infrarsi.controller.cli.main import cli

    def _signed(d, tid):
        d = dict(d, trial_id=tid)
        d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, tid))
        return json.dumps(d).encode()

    spec = {"updates": 12, "window": [4, 12], "tokens_per_update": 256, "seq_len": 16}
    ref = _signed(receipt_dict(), "r")
    crashed = receipt_dict()
    crashed["wrapper"]["exit_code"] = 1
    entries = [("a", _signed(receipt_dict(seed=1), "a"), [ref], spec), ("b", _signed(crashed, "b"), [ref], spec)]
    monkeypatch.setattr(vc, "stored_entries", lambda cid, key: (entries, MASTER))
    r = CliRunner().invoke(cli, ["verify", "--rejudge", "3", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["total"] == 2 and got["accepted"] == 1 and got["by_layer"] == {"L1": 1} and got["by_invariant"] == {"completes": 1}


def test_matrix_subset_from_the_cli():
    p = _infrarsi("verify", "matrix", "--only", "repeat", "--only", "fast_clock", "--only", "replayed")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "agreement: 3/3"
    bad = _infrarsi("verify", "matrix", "--only", "nonesuch")
    assert bad.returncode == 2 and "unknown matrix case 'nonesuch'" in bad.stderr


def test_spec_from_contract_reads_the_judging_facts(tmp_path):
    from infrarsi.verifier.cli import VerifyUsageError, spec_from_contract
    from infrarsi.verifier.spec import JudgeSpec

    (tmp_path / "model.py").write_text("x = 1\n")
    c = tmp_path / "infrarsi.yaml"
    c.write_text(textwrap.dedent("""
        name: demo
        launch: {command: python train.py}
        workload: {tokens_per_update: 4096, seq_len: 64, static: {global_batch: 64}}
        trial: {updates: 20, window: [6, 20]}
        frozen_files: [model.py]
        precision_menu: [fp32, bf16]
        loss_tolerance: 0.05
        memory_cap_gib: 40
    """))
    d = spec_from_contract(str(c))
    spec = JudgeSpec.from_dict(d)
    assert spec.window == (6, 20) and spec.tokens_per_update == 4096 and spec.tau == 0.05
    assert spec.static_invariants == ("global_batch",) and spec.precision_menu == ("fp32", "bf16")
    import hashlib
    assert spec.frozen_manifest == {"model.py": hashlib.sha256(b"x = 1\n").hexdigest()}
    (tmp_path / "model.py").unlink()
    with pytest.raises(VerifyUsageError, match="frozen file model.py"):
        spec_from_contract(str(c))
