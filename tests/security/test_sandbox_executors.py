"""The key sandbox attacks through the real executors (LocalExecutor and SlurmExecutor, real wrapper, real bwrap):
controller secrets in the environment, the master key and other trials on disk, a detached survivor rewriting
the receipt, a trial tree shadowing the wrapper, and the fail-closed refusal surfaced in the job status."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest

from infrarsi.controller.executors.base import Executor, JobStatus, TrialSpec
from infrarsi.controller.executors.local import LocalExecutor
from infrarsi.controller.executors.slurm import SlurmExecutor
from infrarsi.verifier.receipt import load_receipt
from tests.executors.conftest import slurm_cluster, wait_all_fixture  # noqa: F401 (fixtures used here)
from tests.security.sandbox_helpers import (MASTER, SECRET_ENV, SURVIVOR, Trial, make_home, make_trial, wait_gone,
                                            write_attack)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
PY = sys.executable
Waiter = Callable[..., dict[str, JobStatus]]


def _spec(t: Trial, argv: tuple[str, ...], **kw: object) -> TrialSpec:
    return TrialSpec(trial_id=t.tid, workdir=t.src, outdir=t.out, argv=argv, key_file=t.key, time_limit_s=60,
                     src_dir=t.src, scratch_dir=t.scratch, updates=2, **kw)  # type: ignore[arg-type]


def _executor(kind: str, root: Path) -> Executor:
    if kind == "local":
        return LocalExecutor(max_concurrent=2, gpus=[])
    return SlurmExecutor(backoff=(0.2,), steady_interval_s=0.3, receipt_grace_s=1.0, state_dir=root / "state")


@pytest.fixture(params=["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tmp_path.chmod(0o777)  # slurmd writes the job's output here
    return tmp_path


def test_secrets_and_other_trials_stay_out_of_reach(kind: str, root: Path, wait_all: Waiter,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(root)
    monkeypatch.setenv("INFRARSI_HOME", str(home))
    for k, v in SECRET_ENV.items():
        monkeypatch.setenv(k, v)
    a, b = make_trial(root, f"{kind}-a"), make_trial(root, f"{kind}-b")
    (b.out / "receipt.json").write_text("{}")
    (b.src / "model.py").write_text("other trial")
    targets = [str(home / "signing.key"), str(home / "infrarsi.sqlite"), str(a.out), str(b.out / "receipt.json"),
               str(b.src / "model.py")]
    write_attack(a.src, targets)
    ex = _executor(kind, root)
    h = ex.submit(_spec(a, (PY, "attack.py"), env=(("KNOB_X", "1"),)))
    st = wait_all(ex, [h], timeout=120)[a.tid]
    assert st.outcome == "ok", st.reason
    report = json.loads((a.src / "report.json").read_text())
    assert report["paths"] == {p: "ENOENT" for p in targets}, report
    assert report["env"] == [] and report["env_values"] == []
    rec = load_receipt(st.receipt_path, MASTER, a.tid)
    assert rec.data["wrapper"]["isolation"]["mode"] == "bwrap" and not a.key.exists()
    assert st.start_time is not None and st.end_time is not None and st.start_time <= st.end_time


def test_survivor_dies_with_the_trial_and_the_receipt_is_what_was_signed(kind: str, root: Path,
                                                                         wait_all: Waiter) -> None:
    t = make_trial(root, f"{kind}-surv")
    marker = f"infrarsi-exsurv-{os.getpid()}-{kind}-{root.name}"
    (t.src / "job.py").write_text(SURVIVOR)
    ex = _executor(kind, root)
    h = ex.submit(_spec(t, (PY, "job.py", str(t.out / "receipt.json"), marker)))
    st = wait_all(ex, [h], timeout=120)[t.tid]
    assert st.outcome == "ok", st.reason
    assert wait_gone(marker, 5.0) == []
    raw = st.receipt_path.read_bytes()  # type: ignore[union-attr]
    assert "tampered" not in json.loads(raw)
    assert len(load_receipt(raw, MASTER, t.tid).updates) == 2


def test_trial_tree_cannot_shadow_shim_or_wrapper(kind: str, root: Path, wait_all: Waiter) -> None:
    t = make_trial(root, f"{kind}-shadow")
    for pkg in ("infrarsi/verifier", "verifier", "controller/executors"):
        d = t.src / pkg
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
        for mod in ("exec.py", "shim.py"):
            (d / mod).write_text("import sys\nprint('PWNED')\nsys.exit(0)\n")
    (t.src / "infrarsi" / "__init__.py").write_text("")
    ex = _executor(kind, root)
    h = ex.submit(_spec(t, (PY, "-c", "print('genuine job')")))
    st = wait_all(ex, [h], timeout=120)[t.tid]
    assert st.outcome == "ok", st.reason
    rec = load_receipt(st.receipt_path, MASTER, t.tid)
    assert rec.data["wrapper"]["exit_code"] == 0 and "genuine job" in (t.out / "job.log").read_text()


def test_fail_closed_refusal_reaches_the_status(kind: str, root: Path, wait_all: Waiter,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_BWRAP", "/nonexistent/bwrap")
    t = make_trial(root, f"{kind}-closed")
    ex = _executor(kind, root)
    h = ex.submit(_spec(t, (PY, "-c", "open('ran', 'w')")))
    st = wait_all(ex, [h], timeout=120)[t.tid]
    assert st.outcome == "crash"
    assert "infrarsi: error: isolation: bubblewrap /nonexistent/bwrap not available" in st.reason, st.reason
    assert not (t.src / "ran").exists() and st.receipt_path is None
