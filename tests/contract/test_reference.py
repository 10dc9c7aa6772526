"""docs/contract.md is generated from the models and complete: every field has a description and an example, the
committed file equals a fresh rendering, and `contract schema` carries the same descriptions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from infrarsi.controller.contract.checks import KNOWN_PRECISIONS
from infrarsi.controller.contract.model import Contract, Coupling
from infrarsi.controller.contract.reference import PRECISION_MEANINGS, fields, missing_docs, render_reference

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_has_a_description_and_an_example() -> None:
    assert missing_docs() == []


def test_docs_contract_md_is_current() -> None:
    committed = (ROOT / "docs" / "contract.md").read_text()
    assert committed == render_reference(), "docs/contract.md is stale: infrarsi contract reference > docs/contract.md"


def test_every_field_appears_in_the_document() -> None:
    text = render_reference()
    paths = [p for p, *_ in fields()]
    assert len(paths) > 60
    for path in paths:
        assert f"#### `{path}`" in text
    for name in ("apply", "kind", "mechanism", "batch_factor", "solve", "render", "forbid", "flops_per_token"):
        assert any(p.endswith(name) for p in paths), name


def test_precision_names_are_the_checked_list_with_meanings() -> None:
    assert set(PRECISION_MEANINGS) == KNOWN_PRECISIONS
    text = render_reference()
    for name in KNOWN_PRECISIONS:
        assert f"| `{name}` |" in text
    assert "precision=" in text


def test_schema_carries_the_descriptions() -> None:
    out = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "contract", "schema"],
                         capture_output=True, text=True, check=True).stdout
    schema = json.loads(out)
    knob = schema["$defs"]["Knob"]["properties"]
    for name in ("apply", "kind", "mechanism", "batch_factor", "render", "priors"):
        assert knob[name].get("description"), name
    coupling = schema["$defs"]["Coupling"]["properties"]
    assert coupling["solve"]["description"] == Coupling.model_fields["solve"].description
    assert schema["properties"]["forbid"]["description"] == Contract.model_fields["forbid"].description


def test_the_documented_example_passes_check(tmp_path: Path) -> None:
    from infrarsi.controller.contract import check_contract, load_contract, render_launch

    text = render_reference()
    example = text.split("## Minimal example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "infrarsi.yaml"
    path.write_text(example)
    assert check_contract(path)[1] == []
    c = load_contract(path)
    assert "--compile=True" in render_launch(c, {}).argv
