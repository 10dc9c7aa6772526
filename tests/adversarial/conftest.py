"""Fixtures for the adversarial matrix tests: the real single-node Slurm (marker ``slurm``) and PostgreSQL.

Like ``tests/executors/conftest.py``: Slurm tests skip with a reason when ``sinfo`` is absent; when it is present
but the node is down and we are root, ``deploy/slurm-up.sh`` (idempotent) is run once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _slurm_idle() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s.startswith(("idle", "mix", "alloc")) for s in out.stdout.split())


@pytest.fixture(scope="session")
def slurm_up() -> None:
    """The real single-node Slurm is usable (skips otherwise)."""
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed (no sinfo on PATH): run deploy/slurm-up.sh as root")
    if not _slurm_idle():
        if os.geteuid() != 0:
            pytest.skip("Slurm is installed but not up, and bringing it up needs root")
        subprocess.run(["bash", str(REPO / "deploy" / "slurm-up.sh")], check=True, timeout=600)
    if not _slurm_idle():
        pytest.skip("Slurm node did not become usable")


@pytest.fixture(scope="session")
def pg_admin(pg_server: str) -> str:
    """The PostgreSQL admin URL (the root conftest starts the server or skips)."""
    return pg_server
