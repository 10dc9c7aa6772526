"""A wheel built with ``python -m build`` installs into a clean venv and runs a campaign there.

Slow (builds a wheel, makes a venv, installs the runtime dependencies from the package index or pip's cache).
The venv has no access to this checkout: the campaign must run from the installed wheel alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.campaign.helpers import TOY, git_repo

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_wheel_installs_in_a_clean_venv_and_runs_the_toy_campaign(tmp_path: Path) -> None:
    src = tmp_path / "src"  # build from a copy so the checkout gets no build/ or egg-info
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)], timeout=600)
    wheel = next(dist.glob("infrarsi-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], timeout=900)
    # nothing generic lands in site-packages; the namespace imports
    probe = "import importlib.util as u; print([m for m in ('controller','verifier','surrogate','migrations','sbatch_templates') if u.find_spec(m)])"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFRARSI_", "PYTHON"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", INFRARSI_HOME=str(tmp_path / "home"),
               OPENBLAS_NUM_THREADS="1")
    assert _run([str(py), "-c", probe], cwd=tmp_path, env=env).stdout.strip() == "[]"
    repo = git_repo(TOY, tmp_path / "toy")
    out = _run([str(venv / "bin" / "infrarsi"), "run", "infrarsi.yaml"], cwd=repo, env=env, timeout=900)
    report = Path(out.stdout.strip().splitlines()[-1].split()[-1])
    assert report.name == "REPORT.md" and report.is_file(), out.stdout[-2000:]
    result = json.loads((report.parent / "result.json").read_text())
    assert result["delivered_speedup"] >= 1.0 and len(result["trials"]) >= 3, result
    assert "done: delivered speedup" in out.stdout
