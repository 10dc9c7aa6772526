"""Fixtures for executor tests: the stand-in exec wrapper, a job that dumps its
argv/env, a counting Slurm runner, and the real single-node Slurm (marker ``slurm``).

Slurm tests skip with a reason when ``sinfo`` is absent; when it is present but
the cluster is down and we are root, ``deploy/slurm-up.sh`` is run once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import pytest

from infrarsi.controller.executors.base import Executor, JobHandle, JobStatus

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN = HERE / "standin_wrapper.py"
DUMP_JOB = HERE / "dump_job.py"


@pytest.fixture
def standin() -> list[str]:
    """The wrapper command that replaces ``python -m infrarsi.verifier.exec`` in tests."""
    return [sys.executable, str(STANDIN)]


@pytest.fixture
def dump_job() -> Path:
    """A job script: ``dump_job.py OUTFILE ARGS...`` writes {argv, env} as JSON to OUTFILE."""
    return DUMP_JOB


class CountingRunner:
    """Runs Slurm CLIs for real and records every argv (to assert batching)."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        self.argvs.append(list(argv))
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)

    def count(self, tool: str) -> int:
        return sum(1 for a in self.argvs if a[0] == tool)


@pytest.fixture
def counting_runner() -> CountingRunner:
    return CountingRunner()


def _slurm_idle() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s.startswith(("idle", "mix", "alloc")) for s in out.stdout.split())


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The real single-node Slurm; returns the node name.  Skips without Slurm."""
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed (no sinfo on PATH): run deploy/slurm-up.sh as root")
    if not _slurm_idle():
        if os.geteuid() != 0:
            pytest.skip("Slurm is installed but not up, and bringing it up needs root")
        subprocess.run([str(REPO / "deploy" / "slurm-up.sh")], check=True, timeout=600)
    if not _slurm_idle():
        pytest.skip("Slurm node did not become usable")
    return subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def slurm_tmp(tmp_path: Path) -> Path:
    """A directory slurmd (root on this machine) can write: tmp_path itself."""
    tmp_path.chmod(0o777)
    return tmp_path


def _wait_all(ex: Executor, handles: list[JobHandle], timeout: float = 90.0,
             on_poll: Callable[[dict[str, JobStatus]], None] | None = None,
             interval: float = 0.3) -> dict[str, JobStatus]:
    """Poll until every handle is finished (or lost); fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        st = ex.poll(handles)
        if on_poll:
            on_poll(st)
        if all(s.state in ("finished", "lost") for s in st.values()):
            return st
        if time.monotonic() > deadline:
            pytest.fail(f"trials not finished after {timeout} s: { {k: (v.state, v.reason) for k, v in st.items()} }")
        time.sleep(interval)


@pytest.fixture(name="wait_all")
def wait_all_fixture() -> Callable[..., dict[str, JobStatus]]:
    """``wait_all(executor, handles, timeout=90, on_poll=None, interval=0.3)``: poll until all finished."""
    return _wait_all
