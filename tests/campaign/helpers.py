"""Helpers for campaign tests: the toy workload as its own git repo, and running the CLI in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TOY = Path(__file__).parent / "toy"
REPO_ROOT = Path(__file__).resolve().parents[2]


def git_repo(src: Path, dst: Path) -> Path:
    """Copy ``src`` to ``dst`` and make it a git repo with one commit."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(dst), *args], check=True)
    return dst


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("INFRARSI_DATABASE_URL", "INFRARSI_SCRATCH", "INFRARSI_KEY_FILE", "INFRARSI_CRASH_AT"):
        env.pop(k, None)
    env["INFRARSI_HOME"] = str(home)
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def infrarsi(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 600,
             check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"infrarsi {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc
