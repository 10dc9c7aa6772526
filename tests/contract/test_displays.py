"""Displays show knob values as they were passed (``render``), not Python's ``False``: REPORT.md's promoted table
and trial table read ``changed_passed`` from result.json, and the progress/`campaign show` string uses the same
rendering."""

from __future__ import annotations

import copy
from pathlib import Path

from infrarsi.controller.campaign.artifacts import _changed_passed
from infrarsi.controller.contract import load_contract
from infrarsi.controller.contract.launch import config_string
from infrarsi.controller.report.markdown import render_report

CONTRACT = """\
name: displays
launch:
  command: "python train.py {knobs}"
workload:
  tokens_per_update: 64
  seq_len: 64
knobs:
  - name: compile
    values: [false, true]
    reference: false
    render: python
    apply: {flag: "--compile={value}"}
  - name: fused
    values: [false, true]
    reference: false
    render: {true: "1", false: "0"}
    apply: {flag: "--fused={value}"}
"""


def test_report_shows_values_as_passed(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "report_result_shapes", Path(__file__).resolve().parents[1] / "report" / "conftest.py")
    assert spec is not None and spec.loader is not None
    shapes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shapes)
    make_promoted_result = shapes.make_promoted_result
    path = tmp_path / "infrarsi.yaml"
    path.write_text(CONTRACT)
    c = load_contract(path)
    changed = {"compile": [False, True], "fused": [False, True]}
    passed = _changed_passed(c, changed)
    assert passed == {"compile": ["False", "True"], "fused": ["0", "1"]}
    r = copy.deepcopy(make_promoted_result())
    r["promoted"]["changed"] = changed
    r["promoted"]["changed_passed"] = passed
    for t in r["trials"]:
        t["changed"], t["changed_passed"] = changed, passed
    md = render_report(r)
    assert any(line.startswith("| compile") and "| False" in line and "| True" in line for line in md.splitlines())
    assert "compile: False→True" in md and "fused: 0→1" in md
    assert "compile: false→true" not in md
    assert config_string(c, {"compile": True, "fused": False}) == "compile=True, fused=0"
