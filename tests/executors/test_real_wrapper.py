"""The executors with the real exec wrapper (``python -m infrarsi.verifier.exec``, no stand-in):
the receipt is signed with the per-trial key, outcomes come from it, the key file is gone."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from infrarsi.controller.executors.base import JobStatus, TrialSpec
from infrarsi.controller.executors.local import LocalExecutor
from infrarsi.controller.executors.slurm import SlurmExecutor

receipt_mod = pytest.importorskip("infrarsi.verifier.receipt")
signing = pytest.importorskip("infrarsi.verifier.signing")
pytest.importorskip("infrarsi.verifier.exec")

PY = sys.executable
MASTER = b"m" * 32
Waiter = Callable[..., dict[str, JobStatus]]


def _spec(tmp: Path, tid: str, code: str, **kw: object) -> TrialSpec:
    out = tmp / tid
    out.mkdir(parents=True, exist_ok=True)
    key = out / "trial.key"
    signing.write_key_file(str(key), signing.derive_trial_key(MASTER, tid))
    return TrialSpec(trial_id=tid, workdir=tmp, outdir=out, argv=(PY, "-c", code), key_file=key,
                     time_limit_s=60, **kw)  # type: ignore[arg-type]


def _check(st: JobStatus, tid: str, outcome: str) -> None:
    assert st.outcome == outcome, st.reason
    assert st.receipt_path is not None
    r = receipt_mod.load_receipt(st.receipt_path, MASTER, tid)  # signature verifies
    assert r is not None
    assert not (st.receipt_path.parent / "trial.key").exists()


def test_local_with_real_wrapper(tmp_path: Path, wait_all: Waiter) -> None:
    ex = LocalExecutor(max_concurrent=2, gpus=[])
    ok = ex.submit(_spec(tmp_path, "rw-ok", "print('fine')"))
    bad = ex.submit(_spec(tmp_path, "rw-bad", "raise SystemExit(4)"))
    st = wait_all(ex, [ok, bad], timeout=60)
    _check(st["rw-ok"], "rw-ok", "ok")
    _check(st["rw-bad"], "rw-bad", "crash")
    assert st["rw-bad"].exit_code == 4


@pytest.mark.slurm
def test_slurm_with_real_wrapper(slurm_cluster: str, slurm_tmp: Path, wait_all: Waiter) -> None:
    ex = SlurmExecutor(backoff=(0.2,), steady_interval_s=0.3, receipt_grace_s=1.0, state_dir=slurm_tmp / "state")
    ok = ex.submit(_spec(slurm_tmp, "srw-ok", "print('fine')"))
    to = ex.submit(replace(_spec(slurm_tmp, "srw-to", "import time; time.sleep(60)"), time_limit_s=2))
    st = wait_all(ex, [ok, to], timeout=90)
    _check(st["srw-ok"], "srw-ok", "ok")
    _check(st["srw-to"], "srw-to", "timeout")
