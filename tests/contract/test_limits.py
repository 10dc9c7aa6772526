"""Input limits and "refuse now what the executors refuse later": each hostile or out-of-range contract gives
exactly one ``file:line field: message`` line per problem, fast, and never an exception."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from infrarsi.controller.contract import check_contract
from infrarsi.controller.contract.loader import MAX_CONTRACT_BYTES
from infrarsi.controller.contract.model import check_env_name, check_sbatch_name
from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import TrialSpec
from infrarsi.controller.executors.render import render_sbatch
from tests.contract.test_contract_errors import VALID

PROBLEM = re.compile(r"^infrarsi\.yaml:\d+ (\(top level\)|\S+): .+$")


def _check(tmp_path: Path, text: str | bytes) -> list[str]:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data.py").write_text("X = 1\n")
    p = tmp_path / "infrarsi.yaml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    t0 = time.monotonic()
    _, problems = check_contract(p)
    assert time.monotonic() - t0 < 10, "a check must stay fast whatever the input"
    for line in problems:
        assert "\n" not in line and len(line) <= 400 and PROBLEM.match(line), line
    return problems


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


# (what, contract text, expected line, expected field, message fragment)
HOSTILE = [
    ("env name", VALID.replace("  gpus_per_node: 0\n", '  gpus_per_node: 0\n  env: {"MY-VAR": "1"}\n'), 6,
     "launch.env.MY-VAR", "'MY-VAR' is not a valid environment variable name"),
    ("huge trials", VALID.replace("name: tiny\n", "name: tiny\nbudget: {trials: 99999999999}\n"), 2,
     "budget.trials", "less than or equal to 100000"),
    ("5000 digits", VALID.replace("  seq_len: 64\n", "  seq_len: " + "9" * 5000 + "\n"), 8, "(yaml)",
     "5000 characters, too large"),
    ("hex digits", VALID.replace("  seq_len: 64\n", "  seq_len: 0x" + "f" * 4000 + "\n"), 8, "(yaml)", "too large"),
    ("star glob", VALID.replace('editable_files: ["train.py"]', 'editable_files: ["***"]'), 12,
     "editable_files[0]", "'**' can only be an entire path component"),
    ("empty glob", VALID.replace('editable_files: ["train.py"]', 'editable_files: [""]'), 12,
     "editable_files[0]", "empty pattern"),
    ("alias bomb", _alias_bomb() + VALID, 2, "(yaml)", "aliases (*a0) are not allowed"),
    ("deep nesting", VALID + "x: " + "[" * 3000 + "]" * 3000 + "\n", 36, "(yaml)", "nested deeper than"),
    ("partition", VALID.replace("  gpus_per_node: 0\n", '  gpus_per_node: 0\n  partition: "gpu\\n#SBATCH --x"\n'),
     6, "launch.partition", "has characters not allowed in an #SBATCH directive"),
    ("account", VALID.replace("  gpus_per_node: 0\n", '  gpus_per_node: 0\n  account: "a b"\n'), 6,
     "launch.account", "has characters not allowed in an #SBATCH directive"),
    ("zero time", VALID.replace("  gpus_per_node: 0\n", '  gpus_per_node: 0\n  time_limit: "00:00:00"\n'), 6,
     "launch.time_limit", "must be > 0 seconds"),
    ("year time", VALID.replace("  gpus_per_node: 0\n", '  gpus_per_node: 0\n  time_limit: "999-00:00:00"\n'), 6,
     "launch.time_limit", "longer than 365 days"),
    ("single node", VALID.replace("  gpus_per_node: 0\n", "  gpus_per_node: 0\n  nodes: 2\n"), 6, "launch.nodes",
     "launcher 'python' is single-node, got nodes=2"),
    ("nan budget", VALID.replace("name: tiny\n", "name: tiny\nbudget: {gpu_hours: .nan}\n"), 2, "budget.gpu_hours",
     "finite number"),
    ("inf value", VALID.replace("values: [fp32, bf16]", "values: [fp32, .inf]"), 29, "knobs[2].values[1]",
     "must be a boolean, a finite number or a string"),
    ("empty command", VALID.replace('command: "python train.py {knobs}"', 'command: "{knobs}"'), 4,
     "launch.command", "no program to run"),
    ("unbalanced flag", VALID.replace('{flag: "--micro-batch={value}"}', """{flag: "--micro-batch='{value}"}"""), 21,
     "knobs[0].apply.flag", "cannot be split into arguments"),
    ("long name", VALID.replace("name: tiny", "name: " + "n" * 300), 1, "name", "at most 100 characters"),
    ("huge knob value", VALID.replace("values: [4, 8, 16, 64]", "values: [4, 8, 16, 99999999999999999999]"), 17,
     "knobs[0].values", "too large"),
    ("NUL", VALID.replace('name: tiny', 'name: "ti\\0ny"'), 1, "(yaml)", "NUL character"),
    ("bad date", VALID.replace("name: tiny", "name: 2001-13-45"), 1, "name", "is not a valid name"),
    ("bad explicit int", VALID.replace("  seq_len: 64\n", "  seq_len: !!int abc\n"), 8, "(yaml)",
     "cannot read this value"),
    ("duplicate key", VALID + "name: again\n", 36, "(yaml)", 'duplicate key "name"'),
    ("control character", VALID.replace("name: tiny", "name: ti\x07ny"), 1, "(yaml)", "special characters"),
    ("config key", VALID.replace("{env: DTYPE}", "{config: {file: c.json, key: 'a..b'}}"), 31,
     "knobs[2].apply", "empty part"),
]


@pytest.mark.parametrize("what,text,line,field,fragment", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_contract_is_one_line_with_its_field(tmp_path: Path, what: str, text: str, line: int, field: str,
                                                    fragment: str) -> None:
    problems = _check(tmp_path, text)
    hits = [p for p in problems if p.startswith(f"infrarsi.yaml:{line} {field}:") and fragment in p]
    assert hits, problems


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    data = VALID.replace("name: tiny", "name: tiny\n# caf\xe9").encode("latin-1")
    assert _check(tmp_path, data) == ["infrarsi.yaml:2 (file): not UTF-8 text (byte 0xe9 at offset 16)"]


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    text = VALID + "# " + "x" * MAX_CONTRACT_BYTES + "\n"
    t0 = time.monotonic()
    (problem,) = _check(tmp_path, text)
    assert time.monotonic() - t0 < 1 and "larger than" in problem, problem


def test_not_a_regular_file(tmp_path: Path) -> None:
    _, problems = check_contract("/dev/zero")
    assert problems == ["/dev/zero: not a regular file"]


def test_duplicate_check_is_linear(tmp_path: Path) -> None:
    """1000 distinct values (the limit) and 1000 equal ones: both checked in well under a second of checks."""
    values = ", ".join(f"v{i}" for i in range(998))
    text = VALID.replace("values: [fp32, bf16]", f"values: [fp32, bf16, {values}]")
    t0 = time.monotonic()
    assert _check(tmp_path, text) == []
    distinct_s = time.monotonic() - t0
    dupes = VALID.replace("values: [fp32, bf16]", "values: [fp32, bf16" + ", 1" * 998 + "]")  # 1000 values
    problems = _check(tmp_path, dupes)
    assert problems[0] == "infrarsi.yaml:29 knobs[2].values[3]: duplicate value 1" and len(problems) == 101
    assert problems[-1].endswith("... and 897 more problems")
    assert distinct_s < 5, distinct_s
    too_many = VALID.replace("values: [fp32, bf16]", "values: [fp32, bf16" + ", x" * 1000 + "]")
    assert any("at most 1000 items" in p for p in _check(tmp_path, too_many))


def test_one_and_true_are_not_duplicates(tmp_path: Path) -> None:
    text = VALID.replace("values: [fp32, bf16]\n    reference: fp32", "values: [1, true, 1.0, '1']\n    reference: 1")
    problems = _check(tmp_path, text)
    assert [p for p in problems if "duplicate" in p] == ["infrarsi.yaml:29 knobs[2].values[2]: duplicate value 1.0"]


NAMES = ["DTYPE", "_x", "A1_b", "MY-VAR", "9BAD", "", "a=b", "a b", "é", "X\n", "PATH"]
SBATCH = ["gpu", "gpu,cpu", "a.b-c_d+e@f:g=h", "a b", "gpu\n#SBATCH --x", "", "x'y", "a%b", "#"]


def _render_refuses(**spec: object) -> bool:
    base = dict(trial_id="t1", workdir=Path("/tmp/w"), outdir=Path("/tmp/o"), argv=("python", "train.py"))
    try:
        render_sbatch(TrialSpec(**{**base, **spec}), python="python3")  # type: ignore[arg-type]
    except ExecutorError:
        return True
    return False


def _contract_refuses(check: object, value: str) -> bool:
    try:
        check(value)  # type: ignore[operator]
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("name", NAMES)
def test_env_name_rule_agrees_with_the_sbatch_renderer(name: str) -> None:
    assert _contract_refuses(check_env_name, name) == _render_refuses(env=((name, "1"),)), name


@pytest.mark.parametrize("value", SBATCH)
def test_sbatch_name_rule_agrees_with_the_renderer(value: str) -> None:
    refused = _contract_refuses(check_sbatch_name, value)
    assert refused == _render_refuses(partition=value) or value == "", value  # '' means "no partition" there
    assert refused == _render_refuses(account=value) or value == "", value
