"""Onboarding two differently written training scripts (issue 16, "Done when"), as a new user would.

Each script under tests/onboarding/scripts carries only the adapter lines docs/adapters.md gives for its kind of
loop (``prefetch``: argparse and nanoGPT-style prefetching; ``globals``: configurator globals, a DDP-ready loop).
For each: copy it into a fresh git repository, ``infrarsi contract scaffold -- <its launch command>``, settle the
scaffold's TODOs the way its comments ask (trial length and trial-only flags, CPU, a small budget), ``contract
check``, ``infrarsi run`` (local executor, SQLite, bubblewrap), then ``infrarsi apply --branch``: REPORT.md exists
and the applied launch command is the production command with the promoted knobs and none of the trial-only flags.
"""

from __future__ import annotations

import json
import re
import shlex
from io import StringIO
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.campaign.helpers import cli_env, git_repo, infrarsi
from tests.campaign.helpers import git as _git

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
DOCS = HERE.parents[1] / "docs" / "adapters.md"

#: the launch command a user would scaffold from (the production run: thousands of updates)
COMMANDS = {
    "prefetch": "python train.py --batch_size=4 --gradient_accumulation_steps=8 --max_iters=2000",
    "globals": "python train.py --max_iters=1000",
}
UPDATES = 12
TRIAL_ONLY = [f"--max_iters={UPDATES}", "--eval_interval=0", "--log_interval=1000"]
#: the docs' section heading that states each script's line count, e.g. "## 2. nanoGPT-style ... (6 added lines)"
DOC_SECTION = {"prefetch": "nanoGPT-style prefetching", "globals": "torchrun / DistributedDataParallel"}


def _markers(script: Path) -> list[int]:
    return [int(m) for m in re.findall(r"# infrarsi \+(\d+)", script.read_text())]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_scripts_add_exactly_the_documented_lines(name: str) -> None:
    """Every added line is marked ``# infrarsi +N`` (1..N, once each), and N is the count the docs state."""
    marks = _markers(SCRIPTS / name / "train.py")
    assert marks == list(range(1, len(marks) + 1)), marks
    heading = next(line for line in DOCS.read_text().splitlines()
                   if line.startswith("## ") and DOC_SECTION[name] in line)
    stated = int(re.search(r"\((\d+) added lines\)", heading).group(1))  # type: ignore[union-attr]
    assert len(marks) == stated, (heading, marks)
    # nothing else of infrarsi is used: the marked lines are the only ones that mention it
    lines = (SCRIPTS / name / "train.py").read_text().splitlines()
    uses = [ln for ln in lines if re.search(r"\brl\.|ReceiptLogger|infrarsi\.verifier", ln)
            and not ln.lstrip().startswith(("#", '"'))]
    assert all("# infrarsi +" in ln for ln in uses), [ln for ln in uses if "# infrarsi +" not in ln]


def settle_todos(contract: Path) -> None:
    """What the scaffold's TODO comments ask a user to decide, decided for a short CPU campaign."""
    yaml = YAML()
    data = yaml.load(contract.read_text())
    data["launch"]["gpus_per_node"] = 0
    data["launch"]["time_limit"] = "00:04:00"
    data["launch"]["trial_args"] = list(TRIAL_ONLY)
    data["launch"]["env"] = {"OMP_NUM_THREADS": "1"}
    data["trial"]["updates"] = UPDATES
    data["trial"]["window"] = [5, UPDATES]
    data["memory_cap_gib"] = 4
    data["loss_tolerance"] = 0.05
    data["budget"] = {"gpu_hours": 1.0, "trials": 2}
    data["verification"] = {"reference_repeats": 2, "rerun_pairs": 1, "promotion_candidates": 1}
    out = StringIO()
    yaml.dump(data, out)
    contract.write_text(out.getvalue())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_onboard_scaffold_run_report_apply(name: str, tmp_path: Path) -> None:
    repo = git_repo(SCRIPTS / name, tmp_path / name)
    env = cli_env(tmp_path / "home")
    argv = shlex.split(COMMANDS[name])
    scaffolded = infrarsi("contract", "scaffold", "--gpus", "0", "-o", "infrarsi.yaml", "--", *argv, env=env, cwd=repo)
    contract = repo / "infrarsi.yaml"
    assert contract.exists(), scaffolded.stdout + scaffolded.stderr
    text = contract.read_text()
    assert "mechanism: micro_batch" in text and "solve: gradient_accumulation_steps" in text, text
    settle_todos(contract)
    infrarsi("contract", "check", "infrarsi.yaml", env=env, cwd=repo)
    _git(repo, "add", "infrarsi.yaml")
    _git(repo, "commit", "-qm", "infrarsi contract (scaffolded)")

    run = infrarsi("run", env=env, cwd=repo, timeout=900)
    assert "campaign 1 done" in run.stdout, run.stdout + run.stderr
    report = Path(re.search(r"^report: (.+)$", run.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert report.name == "REPORT.md" and report.stat().st_size > 0
    receipts = list((tmp_path / "home" / "scratch").glob("*/trials/*/out/receipt.json"))
    assert len(receipts) >= 4  # references, search trials and re-runs all ran the script with the adapter lines
    for r in (json.loads(p.read_text()) for p in receipts):  # ... every one cleanly, with the trial-only flags
        w = r["wrapper"]
        assert w["exit_code"] == 0 and w["errors"] == [] and w["argv"][-len(TRIAL_ONLY):] == TRIAL_ONLY, w
        assert len(r["updates"]) == UPDATES and r["footer"]["completed"] == UPDATES

    applied = infrarsi("apply", "--branch", "infrarsi/promoted", env=env, cwd=repo)
    assert "applied campaign 1" in applied.stdout, applied.stdout
    promoted = YAML(typ="safe").load(_git(repo, "show", "infrarsi/promoted:infrarsi.promoted.yaml"))
    cmd = promoted["command"]
    assert cmd[:2] == ["python", "train.py"], cmd
    assert "--max_iters=2000" in cmd or "--max_iters=1000" in cmd, cmd  # the production length, not the trial's
    assert not set(TRIAL_ONLY) & set(cmd), cmd
    for knob, value in promoted["knobs"].items():
        assert any(a.startswith(f"--{knob}=") for a in cmd), (knob, value, cmd)
