"""``infrarsi contract check|schema|reference|scaffold``.

``check`` prints every problem as ``file:line field: message`` on stdout (one line each) and, when there is any,
one summary line ``infrarsi: error: ...`` on stderr and exit status 1.  No input makes it print a traceback.
"""

from __future__ import annotations

import json
import sys

import click

from infrarsi.controller.contract import check_contract
from infrarsi.controller.contract.loader import check_warnings
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import one_line


@click.group()
def contract() -> None:
    """Validate task contracts (infrarsi.yaml) and print their JSON Schema."""


@contract.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print problems as a JSON object per file.")
def check(files: tuple[str, ...], as_json: bool) -> None:
    """Report every problem in each contract at once (file:line field: message); exit 1 on any."""
    bad = 0
    total = 0
    report = {}
    for f in files:
        c, problems = check_contract(f)
        report[f] = problems
        if problems:
            bad += 1
            total += len(problems)
            if not as_json:
                for p in problems:
                    click.echo(p)
        elif not as_json:
            assert c is not None
            for w in check_warnings(f):
                click.echo(w, err=True)
            free = len([k for k in c.knobs if k.name not in c.derived_knobs])
            click.echo(f"{f}: ok ({c.name}: {len(c.knobs)} knobs, {free} searched, "
                       f"{c.workload.tokens_per_update} tokens per update)")
    if as_json:
        click.echo(json.dumps(report, indent=2))
    if bad:
        name = one_line(click.format_filename(files[0]).replace("\n", " ").replace("\r", " "), 200)
        where = f"{bad} of {len(files)} contracts" if len(files) > 1 else name
        noun = "problem" if total == 1 else "problems"
        click.echo(f"infrarsi: error: {total} {noun} in {where}", err=True)
        sys.exit(1)


@contract.command("reference")
def reference() -> None:
    """Print the contract reference in Markdown (docs/contract.md is this output)."""
    from infrarsi.controller.contract.reference import render_reference

    click.echo(render_reference(), nl=False)


@contract.command("schema")
def schema() -> None:
    """Print the JSON Schema of infrarsi.yaml (for editors)."""
    click.echo(json.dumps(Contract.model_json_schema(), indent=2))
