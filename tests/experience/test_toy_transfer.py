"""Issue 13's done criterion on the toy workload (real CPU campaigns, local executor, bubblewrap sandbox): a first
campaign writes verified experience back; a second campaign of another contract for the same script, whose knobs
have other names and value spellings but the same ``mechanism`` fields, retrieves it: its ``doctor`` prints the
knobs as covered, the grades are frozen in the doctor record, and its REPORT.md shows them."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.campaign.helpers import cli_env, infrarsi

MECHANISMS = {"speed": "dataloader_workers", "chunk": "micro_batch", "accum": "grad_accum"}


def _contracts(repo: Path) -> tuple[Path, Path]:
    """The toy contract with mechanism fields (A), and a copy with renamed knobs and value spellings (B)."""
    train = repo / "train.py"  # this copy reports a torch version: the campaigns' framework is known (torch)
    code = train.read_text()
    assert 'versions={"python": sys.version.split()[0]}' in code
    train.write_text(code.replace('versions={"python": sys.version.split()[0]}',
                                  'versions={"python": sys.version.split()[0], "torch": "toy"}'))
    yaml = YAML(typ="rt")
    doc = yaml.load((repo / "infrarsi.yaml").read_text())
    for k in doc["knobs"]:
        k["mechanism"] = MECHANISMS[k["name"]]
    a = repo / "contract_a.yaml"
    with a.open("w") as f:
        yaml.dump(doc, f)
    rename = {"speed": "workers", "chunk": "micro_chunks", "accum": "grad_steps"}
    doc = yaml.load(a.read_text())
    # the same model family (the contract name) and sequence length: kernel mechanisms are covered
    for k in doc["knobs"]:
        old = k["name"]
        k["name"] = rename[old]
        if old == "speed":  # values spelled x1/x2/x4, rendered as the numbers the script takes
            k["values"], k["reference"] = ["x1", "x2", "x4"], "x1"
            k["canonical"] = {"x1": "1", "x2": "2", "x4": "4"}
            k["kind"] = "categorical"
            k["render"] = {"x1": "1", "x2": "2", "x4": "4"}
    doc["couplings"][0]["product"] = ["micro_chunks", "grad_steps"]
    doc["couplings"][0]["solve"] = "grad_steps"
    b = repo / "contract_b.yaml"
    with b.open("w") as f:
        yaml.dump(doc, f)
    return a, b


@pytest.mark.slow
def test_second_contract_retrieves_the_first_campaigns_experience(toy_repo: Path, tmp_path: Path) -> None:
    import subprocess

    from tests.campaign.helpers import git_env

    a, b = _contracts(toy_repo)
    for args in (["add", "-A"], ["commit", "-qm", "contracts"]):
        subprocess.run(["git", "-C", str(toy_repo), *args], check=True, env=git_env())
    env = cli_env(tmp_path / "home")
    first = infrarsi("run", str(a), env=env, cwd=toy_repo, timeout=900)
    assert "done" in first.stdout, first.stdout + first.stderr

    doctor = infrarsi("doctor", str(b), env=env, cwd=toy_repo, timeout=600)
    grades = {line.split()[0]: line.split()[1] for line in doctor.stdout.splitlines()
              if line.startswith("    ") and len(line.split()) == 2}
    # the renamed speed knob meets the first campaign's records through mechanism + canonical value
    assert grades.get("workers") == "covered", doctor.stdout
    assert set(grades) == {"workers", "micro_chunks"}  # searched knobs only (grad_steps is derived)
    assert all(g in ("covered", "partial", "null", "unobserved") for g in grades.values())

    from infrarsi.controller.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'home' / 'infrarsi.sqlite'}")
    second = max(store.list_campaigns(), key=lambda c: c.id)
    cov = second.doctor["experience_coverage"]
    assert cov["grades"] == grades  # frozen in the doctor record: replay stays deterministic
    priors = [r for r in second.doctor["experience"] if r.get("knob") == "workers"]
    assert priors and all(r["value"] in ("x2", "x4") and r["log_speedup"] > 0 for r in priors)

    run = infrarsi("run", str(b), env=env, cwd=toy_repo, timeout=900)
    assert "done" in run.stdout, run.stdout + run.stderr
    report = Path(run.stdout.split("report: ", 1)[1].split()[0])
    text = report.read_text()
    assert "### Experience bank" in text and "| workers | covered |" in text, text
