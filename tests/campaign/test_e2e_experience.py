"""Experience transfer end to end on the CPU (issue 13's done criterion, items 1, 2 and 4): a real campaign of the
nanogpt example (micro-batch search, short budget, no patches) writes verified experience back at report time, and
a second report writes nothing new; `infrarsi bank export` writes it as a pack; a second installation imports the
pack, and `doctor` of another contract for the same script whose knobs have other names and value spellings
(examples/nanogpt/infrarsi.renamed.yaml) retrieves it: its `mbs` knob is graded covered and its priors move
towards the first campaign's measured effects; knobs nobody measured stay unobserved."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from infrarsi.controller.store import open_store
from tests.campaign.helpers import cli_env, git_repo, infrarsi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"


def _short_contract(repo: Path) -> Path:
    """infrarsi.yaml searching micro_batch only (grad_accum derived, every other knob fixed at its reference), a
    short budget and no patch folder: every search trial is then a single-knob change against the reference, and
    micro-batching is a lever far beyond the noise gate even on a busy machine, so the write-back has evidence."""
    yaml = YAML(typ="safe")
    doc = yaml.load((repo / "infrarsi.yaml").read_text())
    for knob in doc["knobs"]:
        if knob["name"] not in ("micro_batch", "grad_accum"):
            knob["values"] = [knob["reference"]]
    doc["budget"]["trials"] = 4
    doc.pop("patches", None)
    doc["verification"] = {"reference_repeats": 2, "rerun_pairs": 1, "promotion_candidates": 1}
    path = repo / "infrarsi.short.yaml"
    with path.open("w") as f:
        yaml.dump(doc, f)
    return path


#: above this doctor-measured sigma_pair the machine itself is too loud for a 4-trial campaign to verify anything
#: (its gate is 2 x sigma_pair): the campaign is then run once more in a fresh installation.  A quiet machine
#: measures 1-5% here; the two CI failures this guards against measured 36% while another job shared the 2 cores.
NOISY_SIGMA = 0.15


def _first_campaign(tmp_path: Path, repo: Path, short: Path, attempt: int):
    """Run the short campaign in installation ``home-a<attempt>``; (env, store, effects, sigma_pair)."""
    home = tmp_path / f"home-a{attempt}"
    env = cli_env(home)
    run = infrarsi("run", str(short), env=env, cwd=repo, timeout=1500)
    assert "report: " in run.stdout, run.stdout + run.stderr
    store = open_store(f"sqlite:///{home / 'infrarsi.sqlite'}")
    (c,) = store.list_campaigns()
    return env, store, store.effects(), float(c.doctor["sigma_pair"])


@pytest.mark.slow
def test_pack_from_one_contract_drives_another_contracts_doctor(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    _short_contract(src)  # committed with the rest: frozen files must be clean at init
    repo = git_repo(src, tmp_path / "a")
    short = repo / "infrarsi.short.yaml"
    env_a, store_a, effects, sigma = _first_campaign(tmp_path, repo, short, 1)
    if not effects and sigma > NOISY_SIGMA:  # the noise the campaign measured, not a guess, decides the retry
        env_a, store_a, effects, sigma = _first_campaign(tmp_path, repo, short, 2)
    assert effects, f"the first campaign wrote no verified effect (doctor sigma_pair {sigma:.1%})"
    assert all(e.env.model_family == "nanogpt" and e.env.gpu_sku == "cpu" and e.env.framework == "torch"
               for e in effects)
    n_effects = len(effects)
    again = infrarsi("report", str(short), "--regenerate", "--path", env=env_a, cwd=repo)  # write-back again: no duplicates
    assert "REPORT.md" in again.stdout and len(store_a.effects()) == n_effects
    pack = tmp_path / "nanogpt-cpu.pack.json"
    infrarsi("bank", "export", str(pack), "--source", "cluster-a", env=env_a)
    doc = json.loads(pack.read_text())
    assert doc["format"] == "infrarsi.experience-pack" and len(doc["effects"]) == n_effects

    env_b = cli_env(tmp_path / "home-b")
    imported = infrarsi("bank", "import", str(pack), env=env_b)
    assert f"imported {n_effects} new effects" in imported.stdout
    repo_b = git_repo(EXAMPLE, tmp_path / "b")
    doctor = infrarsi("doctor", "infrarsi.renamed.yaml", env=env_b, cwd=repo_b, timeout=900)
    assert "experience bank:" in doctor.stdout, doctor.stdout
    store_b = open_store(f"sqlite:///{tmp_path / 'home-b' / 'infrarsi.sqlite'}")
    (c,) = store_b.list_campaigns()
    cov = c.doctor["experience_coverage"]
    # micro_batch was measured (as "micro_batch"); the renamed contract calls it mbs (mechanism micro_batch_size)
    assert {e.mechanism for e in effects} == {"micro_batch"}
    assert cov["grades"] == {"mbs": "covered", "precision": "unobserved", "attn_impl": "unobserved",
                             "recompute": "unobserved", "fused_opt": "unobserved"}, cov
    assert "mbs" in doctor.stdout
    priors = {r["value"]: r for r in c.doctor["experience"] if r.get("knob") == "mbs" and "prior_sd" in r}
    measured = {int(e.value): e.log_speedup for e in effects if e.tier == "verified-search" and not e.conditioning}
    assert measured and set(measured) <= set(priors)
    for value, ls in measured.items():  # the prior moved from 0 towards the measured effect, same direction
        assert math.copysign(1, priors[value]["log_speedup"]) == math.copysign(1, ls)
        assert priors[value]["coverage"] == "covered" and priors[value]["prior_sd"] < 0.10
