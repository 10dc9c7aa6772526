"""``infrarsi workload register|list|show`` (cluster admins).

On PostgreSQL only ``infrarsi_admin`` (and the daemon) may register; anyone else gets one ``permission denied``
line from the database.  The owner defaults to who you are (database role, or OS user on SQLite), never LOGNAME.
"""

from __future__ import annotations

from pathlib import Path

import click

from infrarsi.controller.cli.output import emit, emit_obj
from infrarsi.controller.contract import contract_digest, load_contract
from infrarsi.controller.store import open_store


@click.group()
def workload() -> None:
    """Register training workloads and their scheduling limits (admins)."""


@workload.command("register")
@click.argument("contract_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", help="Workload name (default: the contract's name).")
@click.option("--owner", help="Owner of the workload (default: you: your database role, or your OS user on SQLite).")
@click.option("--partition", help="Slurm partition trials of this workload may use.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials of this workload that may run at once.")
def register(contract_file: str, name: str | None, owner: str | None, partition: str | None, max_concurrent: int) -> None:
    """Validate CONTRACT_FILE and register (or update) it as a workload."""
    c = load_contract(contract_file)
    store = open_store()
    rec = store.register_workload(
        name=name or c.name, owner=owner or store.identity(), contract_yaml=Path(contract_file).read_text(),
        contract_digest=contract_digest(c), partition=partition or c.launch.partition, max_concurrent=max_concurrent)
    click.echo(f"workload {rec.name} (id {rec.id}) registered: digest {rec.contract_digest[:12]}, "
               f"partition {rec.partition or '-'}, max {rec.max_concurrent} concurrent")


@workload.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> None:
    """List registered workloads."""
    rows = [{"id": w.id, "name": w.name, "owner": w.owner, "partition": w.partition,
             "max_concurrent": w.max_concurrent, "digest": w.contract_digest[:12], "created": w.created_at}
            for w in open_store().list_workloads()]
    emit(rows, "json" if as_json else "table")


@workload.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def show(name: str, as_json: bool) -> None:
    """Show one workload, including its contract."""
    try:
        w = open_store().get_workload(name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    emit_obj({"id": w.id, "name": w.name, "owner": w.owner, "partition": w.partition,
              "max_concurrent": w.max_concurrent, "contract_digest": w.contract_digest,
              "created": w.created_at, "contract": w.contract_yaml if as_json else "\n" + w.contract_yaml}, as_json)
