"""The job's own copy of the receipt adapters, so a training script imports them without infrarsi installed.

A training job imports ``infrarsi.verifier.adapters.*`` / ``infrarsi.verifier.emit`` (standard library and torch
only).  Its interpreter need not have infrarsi installed: the exec wrapper copies the installed
``infrarsi.verifier`` package (its ``.py`` files; every module there is standard library only, the adapters import
torch lazily) into a folder of the job's (``<lib>/infrarsi/verifier/``) and puts ``<lib>`` first on the job's
``PYTHONPATH``.  The copy is of the wrapper's own version, so the receipt lines a job writes always match what the
wrapper reads.  Without the wrapper nothing changes: a script run as plain ``python train.py`` imports infrarsi
from its environment, where the adapters are a silent no-op.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path


def verifier_dir() -> Path:
    """The installed ``infrarsi.verifier`` package folder (what is copied)."""
    spec = importlib.util.find_spec("infrarsi.verifier")
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parent
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def write_job_lib(dest: Path) -> Path:
    """Copy the verifier package's ``.py`` files to ``dest/infrarsi/verifier/`` (``infrarsi`` stays a namespace
    package, as installed) and return ``dest``, the folder to put first on the job's ``PYTHONPATH``."""
    src = verifier_dir()
    target = Path(dest) / "infrarsi" / "verifier"
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        rel = Path(root).relative_to(src)
        for name in sorted(files):
            if name.endswith(".py"):
                (target / rel).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(root) / name, target / rel / name)
    return Path(dest)


def job_pythonpath(lib: Path, existing: str | None) -> str:
    """``PYTHONPATH`` for the job: ``lib`` first, then whatever the job's own environment passes through."""
    return str(lib) + (os.pathsep + existing if existing else "")
