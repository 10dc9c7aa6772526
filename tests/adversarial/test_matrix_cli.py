"""``infrarsi verify matrix``: the receipt matrix and the adversarial section, agreement per section and overall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "verify", "matrix", *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def test_matrix_prints_agreement_per_section_and_overall() -> None:
    p = _cli("--only", "repeat", "--only", "binary_hunk", "--only", "symlink_escape")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "== receipt matrix ==" and "== adversarial ==" in lines
    assert [ln for ln in lines if ln.startswith("agreement:")] == ["agreement: 1/1", "agreement: 2/2", "agreement: 3/3"]
    assert lines[-1] == "agreement: 3/3"


def test_matrix_json_and_adversarial_only() -> None:
    p = _cli("--adversarial-only", "--only", "binary_hunk", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert "cases" not in doc and doc["adversarial"]["agreement"] == [1, 1] and doc["overall"] == [1, 1]
    assert doc["adversarial"]["cases"][0]["got"].startswith("refused at intake:")


def test_unknown_case_is_a_one_line_usage_error() -> None:
    p = _cli("--only", "no_such_case")
    assert p.returncode == 2
    assert p.stderr.strip() == "infrarsi: error: --only: unknown matrix case 'no_such_case'"
