"""The doctor's experience snapshot names pooled values: two values of one knob that the bank files under one
canonical value (the warning `contract check` gives) are repeated in the doctor's coverage, in `doctor`'s output
and in REPORT.md, since that knob's records, read and written, pool both states.

The attack it stops: a contract that spells two compile modes so that both normalize to graph_compile=on reads
and writes one pooled record for two states; the user who never ran `contract check` still sees it, once at
doctor time and once in the report."""

from __future__ import annotations

import shutil
from pathlib import Path

from ruamel.yaml import YAML

from infrarsi.controller.contract.loader import load_contract
from infrarsi.controller.experience.doctor import doctor_experience, pooled_values
from infrarsi.controller.report.sections import experience_section
from infrarsi.controller.store import open_store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt" / "infrarsi.yaml"


def _contract(tmp_path: Path, compile_values: list[str] | None, canonical: dict[str, str] | None = None):
    yaml = YAML(typ="safe")
    doc = yaml.load(EXAMPLE.read_text())
    for knob in doc["knobs"]:
        if knob["name"] == "compile" and compile_values is not None:
            knob["values"], knob["reference"] = compile_values, compile_values[0]
            if canonical:
                knob["canonical"] = canonical
    repo = tmp_path / f"repo-{len(list(tmp_path.glob('repo-*')))}"  # a copy: the contract's paths are relative
    shutil.copytree(EXAMPLE.parent, repo)
    with (repo / "infrarsi.yaml").open("w") as f:
        yaml.dump(doc, f)
    return load_contract(repo / "infrarsi.yaml")


def test_doctor_records_and_report_shows_pooled_values(tmp_path: Path) -> None:
    pooled = _contract(tmp_path, ["none", "default", "max-autotune"])
    assert pooled_values(pooled) == ["compile: default and max-autotune are both graph_compile=on"]
    store = open_store(f"sqlite:///{tmp_path / 'bank.sqlite'}", auto_upgrade=True)
    snap = doctor_experience(store, pooled)
    cov = snap["experience_coverage"]
    assert cov["pooled"] == pooled_values(pooled) and cov["grades"]["compile"] == "unobserved"
    text = experience_section({"experience": cov})
    assert "the bank pools their records" in text
    assert "- compile: default and max-autotune are both graph_compile=on" in text


def test_no_pooled_entry_when_values_are_kept_apart(tmp_path: Path) -> None:
    apart = _contract(tmp_path, ["none", "default", "max-autotune"], canonical={"max-autotune": "autotune"})
    assert pooled_values(apart) == []
    store = open_store(f"sqlite:///{tmp_path / 'bank.sqlite'}", auto_upgrade=True)
    cov = doctor_experience(store, apart)["experience_coverage"]
    assert "pooled" not in cov
    assert "canonical value" not in experience_section({"experience": cov})
    assert pooled_values(_contract(tmp_path, None)) == []  # the shipped example pools nothing
