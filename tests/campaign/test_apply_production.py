"""Trial-only settings stay out of production, and read-only inputs not in git reach every trial: a real CLI
campaign (local executor, bubblewrap) on the toy job made to read a git-ignored ``data/tokens.bin``, with the
production launch in ``launch.command`` and the trial length in ``launch.trial_args``; then ``infrarsi apply
--branch``: the applied command has the promoted knobs and no trial-only flag, every trial's command had them."""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML

from infrarsi.controller.contract import load_contract, render_launch
from tests.campaign.helpers import cli_env, infrarsi
from tests.campaign.helpers import git as _git

TOKENS = bytes(range(256)) * 64

READ_DATA = '''a = p.parse_args()
with open("data/tokens.bin", "rb") as fh:  # git-ignored: reaches the trial only as a read-only input
    if fh.read() != bytes(range(256)) * 64:
        sys.exit("data/tokens.bin differs")
'''

TRIAL_ONLY = ["--updates=8", "--fail-on-speed=0"]


def onboard(toy_repo: Path) -> Path:
    """The toy with a git-ignored data file it reads, ``inputs: [{path: data}]`` and trial-only arguments; the
    production command trains 1000 updates."""
    train = toy_repo / "train.py"
    train.write_text(train.read_text().replace("a = p.parse_args()\n", READ_DATA, 1))
    (toy_repo / ".gitignore").write_text("data/*.bin\n")
    (toy_repo / "data").mkdir()
    (toy_repo / "data" / "README").write_text("tokens.bin is made by a script, not committed\n")
    (toy_repo / "data" / "tokens.bin").write_bytes(TOKENS)
    contract = toy_repo / "infrarsi.yaml"
    text = contract.read_text().replace('  command: "python3 train.py {knobs}"\n',
                                        '  command: "python3 train.py --updates 1000 {knobs}"\n'
                                        f'  trial_args: {json.dumps(TRIAL_ONLY)}\n'
                                        '  trial_env: {TOY_TRIAL: "1"}\n', 1)
    contract.write_text(text + "inputs:\n  - path: data\n")
    _git(toy_repo, "add", "-A")
    _git(toy_repo, "commit", "-qm", "read data; trial-only args")
    assert "data/tokens.bin" not in _git(toy_repo, "ls-files")
    return contract


def test_render_keeps_trial_only_settings_out_of_production(toy_repo: Path) -> None:
    contract = load_contract(onboard(toy_repo))
    prod = render_launch(contract, {"speed": 4, "chunk": 2})
    trial = render_launch(contract, {"speed": 4, "chunk": 2}, trial=True)
    assert list(prod.argv) == ["python3", "train.py", "--updates", "1000", "--speed=4", "--chunk=2", "--accum=1"]
    assert list(trial.argv) == list(prod.argv) + TRIAL_ONLY
    assert "TOY_TRIAL" not in dict(prod.env) and dict(trial.env)["TOY_TRIAL"] == "1"


def test_campaign_sees_ignored_data_and_apply_writes_only_the_production_command(toy_repo: Path,
                                                                                  tmp_path: Path) -> None:
    onboard(toy_repo)
    env = cli_env(tmp_path / "home")
    run = infrarsi("run", env=env, cwd=toy_repo, timeout=900)
    assert "campaign 1 done" in run.stdout, run.stdout + run.stderr
    receipts = [json.loads(p.read_text()) for p in (tmp_path / "home" / "scratch").glob("toy-*/trials/*/out/receipt.json")]
    assert len(receipts) >= 6
    for r in receipts:  # every trial read the ignored file (a missing or different file exits non-zero) ...
        assert r["wrapper"]["exit_code"] == 0 and r["wrapper"]["isolation"]["mode"] == "bwrap", r["wrapper"]
        assert r["wrapper"]["argv"][-len(TRIAL_ONLY):] == TRIAL_ONLY  # ... and ran with the trial-only flags
    applied = infrarsi("apply", "--branch", "infrarsi/promoted", env=env, cwd=toy_repo)
    assert "applied campaign 1" in applied.stdout
    promoted = YAML(typ="safe").load(_git(toy_repo, "show", "infrarsi/promoted:infrarsi.promoted.yaml"))
    cmd = promoted["command"]
    assert cmd[:4] == ["python3", "train.py", "--updates", "1000"]
    assert not set(TRIAL_ONLY) & set(cmd) and "TOY_TRIAL" not in promoted["env"]
    knobs = promoted["knobs"]
    assert f"--speed={knobs['speed']}" in cmd and f"--chunk={knobs['chunk']}" in cmd
    # the data never entered git, on the branch or anywhere
    assert "data/tokens.bin" not in _git(toy_repo, "ls-tree", "-r", "--name-only", "infrarsi/promoted")
    assert (toy_repo / "data" / "tokens.bin").read_bytes() == TOKENS


def test_an_input_changed_after_init_fails_the_campaign_naming_the_file(toy_repo: Path, tmp_path: Path) -> None:
    onboard(toy_repo)
    env = cli_env(tmp_path / "home")
    first = infrarsi("run", "--drain-after", "0", env=env, cwd=toy_repo)  # init locks, nothing launches
    assert "paused in state doctor" in first.stdout, first.stdout + first.stderr
    assert not list((tmp_path / "home" / "scratch").glob("toy-*/trials/*"))
    (toy_repo / "data" / "tokens.bin").write_bytes(TOKENS[::-1])
    again = infrarsi("run", env=env, cwd=toy_repo, check=False)
    assert again.returncode == 2, again.stdout + again.stderr
    last = again.stderr.strip().splitlines()[-1]
    assert "inputs: 'data': tokens.bin changed since init" in last and "Traceback" not in again.stderr


def test_trial_args_that_cannot_be_split_are_refused_by_the_contract(toy_repo: Path) -> None:
    import pytest

    from infrarsi.controller.errors import ContractError

    contract = onboard(toy_repo)
    contract.write_text(contract.read_text().replace(json.dumps(TRIAL_ONLY), '["--note=\\"unclosed"]'))
    with pytest.raises(ContractError, match="cannot be split into arguments"):
        load_contract(contract)
