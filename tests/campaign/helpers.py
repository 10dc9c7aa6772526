"""Helpers for campaign tests: the toy workload as its own git repo, and running the CLI in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TOY = Path(__file__).parent / "toy"
REPO_ROOT = Path(__file__).resolve().parents[2]


#: A commit identity for tests: a fresh HOME has no ~/.gitconfig, and git refuses to commit without one.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "infrarsi-test", "GIT_AUTHOR_EMAIL": "test@localhost",
                "GIT_COMMITTER_NAME": "infrarsi-test", "GIT_COMMITTER_EMAIL": "test@localhost"}


def git_env() -> dict[str, str]:
    """``os.environ`` plus :data:`GIT_IDENTITY` (for every git command a test runs that records a commit)."""
    return {**os.environ, **GIT_IDENTITY}


def git(repo: Path, *args: str) -> str:
    """``git -C repo args...`` with the test identity; returns stdout, raises on failure."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=git_env()).stdout


def git_repo(src: Path, dst: Path) -> Path:
    """Copy ``src`` to ``dst`` and make it a git repo with one commit."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(dst), *args], check=True, env=git_env())
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
