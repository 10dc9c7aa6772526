"""Every class of contract error names the file line and the field, and all problems come out at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.controller.contract import check_contract, complete_config, legal_configs, load_contract, render_launch
from infrarsi.controller.errors import ContractError

VALID = """\
name: tiny
repo: .
launch:
  command: "python train.py {knobs}"
  gpus_per_node: 0
workload:
  tokens_per_update: 4096
  seq_len: 64
trial:
  updates: 30
  window: [11, 30]
editable_files: ["train.py"]
frozen_files: ["data.py"]
precision_menu: [fp32, bf16]
knobs:
  - name: micro_batch
    values: [4, 8, 16, 64]
    reference: 4
    kind: ordered
    batch_factor: true
    apply: {flag: "--micro-batch={value}"}
  - name: grad_accum
    values: [1, 4, 8, 16]
    reference: 16
    kind: ordered
    batch_factor: true
    apply: {flag: "--grad-accum={value}"}
  - name: dtype
    values: [fp32, bf16]
    reference: fp32
    apply: {env: DTYPE}
couplings:
  - product: [micro_batch, grad_accum]
    equals: 64
    solve: grad_accum
"""

# (replace old -> new, expected line, expected field, expected message fragment)
BROKEN = [
    ("    reference: fp32\n", "    reference: fp8\n", 30, "knobs[2].reference", "'fp8' is not one of values [fp32, bf16]"),
    ("  tokens_per_update: 4096\n", "  tokens_per_update: 2048\n", 7, "workload.tokens_per_update", "differs from the reference"),
    ("  window: [11, 30]\n", "  window: [11, 40]\n", 11, "trial.window", "1 <= start <= end <= updates"),
    ("frozen_files: [\"data.py\"]\n", "frozen_files: [\"../secret.py\"]\n", 13, "frozen_files[0]", "leaves the repo"),
    ("    apply: {env: DTYPE}\n", "    apply: {env: 9BAD}\n", 31, "knobs[2].apply", "not a valid environment variable"),
    ("    apply: {flag: \"--micro-batch={value}\"}\n", "    apply: {flag: \"--micro-batch\"}\n", 21, "knobs[0].apply.flag", "no {value} placeholder"),
    ("    solve: grad_accum\n", "    solve: dtype\n", 35, "couplings[0].solve", "'dtype' is not in product"),
    ("  - product: [micro_batch, grad_accum]\n", "  - product: [micro_batch, grad_acum]\n", 33, "couplings[0].product[1]", "unknown knob 'grad_acum'"),
    ("name: tiny\n", "name: tiny\nbudgett: {trials: 3}\n", 2, "budgett", "unknown field"),
    ("precision_menu: [fp32, bf16]\n", "precision_menu: [fp32, bf17]\n", 14, "precision_menu[1]", "not a known precision"),
    ("  seq_len: 64\n", "  seq_len: -64\n", 8, "workload.seq_len", "greater than 0"),
    ("    values: [fp32, bf16]\n", "    values: [fp32, bf16, fp32]\n", 29, "knobs[2].values[2]", "duplicate value"),
]


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data.py").write_text("X = 1\n")
    p = tmp_path / "infrarsi.yaml"
    p.write_text(text)
    return p


def test_valid_contract_loads(tmp_path: Path) -> None:
    c = load_contract(_write(tmp_path, VALID))
    assert c.derived_knobs == {"grad_accum"}
    configs = list(legal_configs(c))
    assert len(configs) == 8  # 4 micro-batches x 2 dtypes, grad_accum derived
    assert all(cfg["micro_batch"] * cfg["grad_accum"] == 64 for cfg in configs)
    assert complete_config(c, {"micro_batch": 8}) == {"micro_batch": 8, "grad_accum": 8, "dtype": "fp32"}


@pytest.mark.parametrize("old,new,line,field,fragment", BROKEN, ids=[b[3] for b in BROKEN])
def test_each_error_names_line_and_field(tmp_path: Path, old: str, new: str, line: int, field: str,
                                         fragment: str) -> None:
    assert old in VALID
    _, problems = check_contract(_write(tmp_path, VALID.replace(old, new, 1)))
    assert problems, "a broken contract must be reported"
    matching = [p for p in problems if re.match(rf"infrarsi\.yaml:\d+ {re.escape(field)}", p)]
    assert matching, problems
    assert fragment in matching[0], matching[0]
    assert matching[0].startswith(f"infrarsi.yaml:{line} "), (matching[0], line)


def test_ten_broken_contracts_give_distinct_messages(tmp_path: Path) -> None:
    messages = set()
    for i, (old, new, *_rest) in enumerate(BROKEN):
        d = tmp_path / str(i)
        d.mkdir()
        _, problems = check_contract(_write(d, VALID.replace(old, new, 1)))
        messages.add(problems[0])
    assert len(messages) >= 10


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = VALID.replace("reference: fp32", "reference: fp8").replace("precision_menu: [fp32, bf16]",
                                                                      "precision_menu: [fp32, bf17]")
    _, problems = check_contract(_write(tmp_path, text))
    assert len(problems) >= 2
    assert any("knobs[2].reference" in p for p in problems) and any("precision_menu[1]" in p for p in problems)


def test_tokens_changing_combination_rejected(tmp_path: Path) -> None:
    # no coupling: micro_batch alone changes tokens per update
    text = VALID.split("couplings:")[0]
    _, problems = check_contract(_write(tmp_path, text))
    assert any("changes tokens per update" in p for p in problems), problems
    # a coupling that admits a combination with the wrong token count (world size ignored wrongly)
    text2 = VALID.replace("    solve: grad_accum\n", "").replace("values: [1, 4, 8, 16]", "values: [1, 4, 8, 16, 2]")
    text2 = text2.replace("equals: 64", "equals: 64\n    times_world_size: false")
    _, problems2 = check_contract(_write(tmp_path, text2))
    assert problems2 == [], problems2  # product fixed at 64 -> every legal combination keeps 4096 tokens


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    _, problems = check_contract(_write(tmp_path, VALID.replace("  seq_len: 64\n", "  seq_len: [64\n")))
    assert len(problems) == 1 and re.match(r"infrarsi\.yaml:\d+ \(yaml\)", problems[0]), problems


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="not found"):
        load_contract(tmp_path / "nope.yaml")


def test_injection_values_stay_data(tmp_path: Path) -> None:
    text = VALID.replace("values: [fp32, bf16]\n    reference: fp32\n    apply: {env: DTYPE}",
                         "values: [fp32, '$(touch pwned)']\n    reference: fp32\n    apply: {flag: \"--dtype {value}\"}")
    c = load_contract(_write(tmp_path, text))
    plan = render_launch(c, {"dtype": "$(touch pwned)"})
    assert plan.argv[-2:] == ("--dtype", "$(touch pwned)")


def test_unknown_knob_in_config_is_a_clear_error(tmp_path: Path) -> None:
    c = load_contract(_write(tmp_path, VALID))
    with pytest.raises(ContractError, match="unknown knob 'micro_bach'"):
        render_launch(c, {"micro_bach": 8})


def test_cli_check_and_schema(tmp_path: Path) -> None:
    bad = _write(tmp_path, VALID.replace("reference: fp32", "reference: fp8"))
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "check", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "infrarsi.yaml:30 knobs[2].reference: 'fp8' is not one of values [fp32, bf16]" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "schema"],
                          capture_output=True, text=True, check=True)
    schema = json.loads(proc.stdout)
    assert "knobs" in schema["properties"] and "launch" in schema["properties"]
