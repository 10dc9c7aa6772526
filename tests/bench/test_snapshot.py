"""bench/snapshot.sh: a frozen copy of the code that a variant sweep imports instead of the installed tree."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_snapshot_is_what_python_imports_under_its_pythonpath(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    subprocess.run(["bash", str(ROOT / "bench" / "snapshot.sh"), str(dest)], check=True, capture_output=True)
    assert (dest / "bench" / "sweep.py").is_file() and not list(dest.rglob("__pycache__"))
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {p.name for p in (dest / "infrarsi").iterdir()} == set(mapped.values())   # every package folder
    # a variant edited in the snapshot only
    ctl = dest / "infrarsi" / "controller" / "search" / "controller.py"
    ctl.write_text(ctl.read_text() + "\nSNAPSHOT_MARK = 1\n")
    code = ("import infrarsi.controller.search.controller as c, infrarsi.verifier as v; "
            "print(c.__file__); print(getattr(c, 'SNAPSHOT_MARK', 0)); print(list(v.__path__)[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=dest, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(dest)}).stdout.split()
    assert out[0].startswith(str(dest)) and out[1] == "1" and out[2].startswith(str(dest))
