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
            cap = "none" if c.memory_cap_gib is None else f"{c.memory_cap_gib:g} GiB"
            click.echo(f"{f}: ok ({c.name}: {len(c.knobs)} knobs, {free} searched, "
                       f"{c.workload.tokens_per_update} tokens per update, memory cap {cap})")
    if as_json:
        click.echo(json.dumps(report, indent=2))
    if bad:
        name = one_line(click.format_filename(files[0]).replace("\n", " ").replace("\r", " "), 200)
        where = f"{bad} of {len(files)} contracts" if len(files) > 1 else name
        noun = "problem" if total == 1 else "problems"
        click.echo(f"infrarsi: error: {total} {noun} in {where}", err=True)
        sys.exit(1)


@contract.command("scaffold", context_settings={"ignore_unknown_options": True})
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the contract here (default: print it); repo: is made relative to its folder.")
@click.option("--repo", type=click.Path(file_okay=False, exists=True), default=None,
              help="The training repository's root (default: the git work tree holding the script).")
@click.option("--name", default=None, help="Contract name (default: the repository folder's name).")
@click.option("--gpus", type=click.IntRange(0, 64), default=None,
              help="gpus_per_node (default: torchrun's --nproc_per_node, else 1; 0 for a CPU job).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def scaffold_cmd(output: str | None, repo: str | None, name: str | None, gpus: int | None,
                 command: tuple[str, ...]) -> None:
    """Propose a contract from a launch command: infrarsi contract scaffold -- python train.py --batch_size=12

    The script is read (argparse calls or configurator-style module globals), never run.  Review the TODO
    comments, then run `infrarsi contract check` on the result.
    """
    from pathlib import Path

    from infrarsi.controller.contract.scaffold import scaffold

    out = Path(output) if output else None
    text = scaffold(list(command), repo=Path(repo) if repo else None, output=out, name=name, gpus=gpus).yaml()
    if out is None:
        click.echo(text, nl=False)
        return
    if out.exists():
        raise click.UsageError(f"{out} exists; remove it or choose another --output")
    out.write_text(text)
    click.echo(f"wrote {out}; review its TODO comments, then: infrarsi contract check {out}", err=True)


@contract.command("reference")
def reference() -> None:
    """Print the contract reference in Markdown (docs/contract.md is this output)."""
    from infrarsi.controller.contract.reference import render_reference

    click.echo(render_reference(), nl=False)


@contract.command("schema")
def schema() -> None:
    """Print the JSON Schema of infrarsi.yaml (for editors)."""
    click.echo(json.dumps(Contract.model_json_schema(), indent=2))
