"""``infrarsi contract check|schema``."""

from __future__ import annotations

import json
import sys

import click

from infrarsi.controller.contract import check_contract
from infrarsi.controller.contract.model import Contract


@click.group()
def contract() -> None:
    """Validate task contracts (infrarsi.yaml) and print their JSON Schema."""


@contract.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print problems as a JSON object per file.")
def check(files: tuple[str, ...], as_json: bool) -> None:
    """Report every problem in each contract at once (file:line field: message); exit 1 on any."""
    bad = 0
    report = {}
    for f in files:
        c, problems = check_contract(f)
        report[f] = problems
        if problems:
            bad += 1
            if not as_json:
                for p in problems:
                    click.echo(p)
        elif not as_json:
            assert c is not None
            free = len([k for k in c.knobs if k.name not in c.derived_knobs])
            click.echo(f"{f}: ok ({c.name}: {len(c.knobs)} knobs, {free} searched, "
                       f"{c.workload.tokens_per_update} tokens per update)")
    if as_json:
        click.echo(json.dumps(report, indent=2))
    if bad:
        sys.exit(1)


@contract.command("schema")
def schema() -> None:
    """Print the JSON Schema of infrarsi.yaml (for editors)."""
    click.echo(json.dumps(Contract.model_json_schema(), indent=2))
