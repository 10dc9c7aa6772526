"""Packaging: every module is installed under the ``infrarsi`` namespace and nothing imports the bare folders."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("controller", "verifier", "surrogate", "migrations", "sbatch_templates")
BARE = re.compile(rf"^\s*(from|import)\s+({'|'.join(FOLDERS)})(\.|\s|$)", re.M)


def test_every_package_folder_is_listed_under_the_namespace() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    on_disk = {"infrarsi." + ".".join(p.parent.relative_to(ROOT).parts)
               for f in FOLDERS for p in (ROOT / f).rglob("__init__.py")}
    assert on_disk == listed, f"pyproject packages differ from the folders: {sorted(on_disk ^ listed)}"
    assert set(cfg["package-dir"]) == {f"infrarsi.{f}" for f in FOLDERS}


def test_no_source_file_imports_a_bare_top_level_folder() -> None:
    offenders = []
    for folder in (*FOLDERS, "tests", "examples", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for m in BARE.finditer(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(0).strip()}")
    assert not offenders, "bare imports (use infrarsi.<folder>):\n" + "\n".join(offenders)


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test files by basename (no __init__.py): two files with one name break collection."""
    seen: dict[str, Path] = {}
    dups = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            dups.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not dups, "test files sharing a basename: " + "; ".join(dups)
