"""``infrarsi bank``: the experience bank (docs/experience.md).

- ``bank list``: effects, one row each (filters: mechanism, SKU, model family, campaign);
- ``bank show MECHANISM``: the catalog entry and every effect of a mechanism (or alias), grouped by value;
- ``bank export FILE``: a versioned pack (JSON, or YAML for ``.yaml``/``.yml``; ``-`` for stdout) of the matching
  records;
- ``bank import FILE``: validates the whole pack (one-line error naming file, path and problem; nothing written
  unless all of it is valid), then stores it idempotently (a second import adds nothing);
- ``bank prune``: deletes records by age (``--older-than 90d`` or an ISO time), SKU or campaign (label
  ``name#id``, or a local campaign id); ``--dry-run`` counts without deleting.

The database is the configured one (``INFRARSI_DATABASE_URL``), or ``--db URL``.  On PostgreSQL, import and
prune need the admin role (deploy/roles.sql).
"""

from __future__ import annotations

import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from infrarsi.controller.cli.output import emit
from infrarsi.controller.errors import InfrarsiError


def _store(db: str | None) -> Any:
    from infrarsi.controller.store import open_store

    return open_store(db) if db else open_store()


db_option = click.option("--db", metavar="URL", help="Database URL (default: the configured one).")


def _filters(f: Any) -> Any:
    f = click.option("--mechanism", "mechanisms", multiple=True,
                     help="Only this mechanism (catalog name or alias; repeatable).")(f)
    f = click.option("--sku", help="Only records measured on this GPU SKU.")(f)
    f = click.option("--family", "model_family", help="Only this model family.")(f)
    f = click.option("--campaign", help="Only this source campaign (label name#id).")(f)
    return f


def _mechs(names: tuple[str, ...]) -> list[str] | None:
    from infrarsi.controller.experience.mechanisms import resolve

    return [resolve(n) or n for n in names] or None


@click.group()
def bank() -> None:
    """The experience bank: list, show, export, import and prune verified experience."""


@bank.command("list")
@_filters
@db_option
@click.option("--json", "as_json", is_flag=True)
def list_cmd(mechanisms: tuple[str, ...], sku: str | None, model_family: str | None, campaign: str | None,
             db: str | None, as_json: bool) -> None:
    """List effects, oldest first."""
    effects = _store(db).effects(mechanisms=_mechs(mechanisms), gpu_sku=sku, model_family=model_family,
                                 campaign=campaign)
    rows = [{"id": e.id, "mechanism": e.mechanism, "value": e.value, "class": e.klass,
             "speedup": round(2.718281828459045 ** e.log_speedup, 4), "log_speedup": e.log_speedup,
             "noise": e.noise_floor, "tier": e.tier, "sku": e.env.gpu_sku if e.env else None,
             "family": e.env.model_family if e.env else None, "campaign": e.campaign, "knob": e.knob,
             "conditioning": ",".join(f"{k}={v}" for k, v in sorted(e.conditioning.items())) or None,
             "created_at": e.created_at} for e in effects]
    if as_json:
        emit(rows, "json")
    else:
        emit(rows, columns=["id", "mechanism", "value", "class", "speedup", "tier", "sku", "family", "campaign",
                            "knob", "conditioning"])


@bank.command("show")
@click.argument("mechanism")
@db_option
@click.option("--json", "as_json", is_flag=True)
def show_cmd(mechanism: str, db: str | None, as_json: bool) -> None:
    """A mechanism's catalog entry and its effects by value (median speedup, range, SKUs)."""
    import json

    from infrarsi.controller.experience.mechanisms import CATALOG, mechanism_class, resolve

    name = resolve(mechanism) or mechanism
    entry = CATALOG.get(name)
    effects = _store(db).effects(mechanisms=[name])
    by_value: dict[str, list[Any]] = {}
    for e in effects:
        by_value.setdefault(e.value, []).append(e)
    values = [{"value": v, "records": len(es), "median_log_speedup": statistics.median(e.log_speedup for e in es),
               "min": min(e.log_speedup for e in es), "max": max(e.log_speedup for e in es),
               "skus": sorted({e.env.gpu_sku for e in es if e.env})} for v, es in sorted(by_value.items())]
    if entry is None and not effects:
        raise InfrarsiError(f"no mechanism '{mechanism}' in the catalog or the bank")
    doc = {"mechanism": name, "class": entry.klass if entry else mechanism_class(name),
           "in_catalog": entry is not None, "description": entry.description if entry else "",
           "aliases": list(entry.aliases) if entry else [],
           "prior_log_speedup": entry.prior_log_speedup if entry else None,
           "prior_spread": entry.prior_spread if entry else None, "mem_gib": entry.mem_gib if entry else None,
           "canonical_values": list(entry.canonical_values or []) if entry else [], "values": values}
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{name} ({doc['class']}{'' if entry else ', not in the catalog'}): {doc['description']}")
    if doc["aliases"]:
        click.echo(f"  aliases: {', '.join(doc['aliases'])}")
    if entry and entry.prior_log_speedup is not None:
        click.echo(f"  catalog prior: log-speedup {entry.prior_log_speedup:+.3f} +- {entry.prior_spread}")
    emit([{"value": v["value"], "records": v["records"], "median": v["median_log_speedup"], "min": v["min"],
           "max": v["max"], "skus": ",".join(v["skus"])} for v in values])


@bank.command("export")
@click.argument("path")
@_filters
@db_option
@click.option("--no-observations", is_flag=True, help="Effects only (no observations).")
@click.option("--source", default="", help="Free-form origin written into the pack (cluster name).")
def export_cmd(path: str, mechanisms: tuple[str, ...], sku: str | None, model_family: str | None,
               campaign: str | None, db: str | None, no_observations: bool, source: str) -> None:
    """Write a versioned experience pack (JSON; YAML when PATH ends in .yaml or .yml; - for stdout)."""
    from infrarsi.controller.experience.pack import dump_pack, export_pack

    doc = export_pack(_store(db), mechanisms=_mechs(mechanisms), gpu_sku=sku, model_family=model_family,
                      campaign=campaign, observations=not no_observations, source=source)
    fmt = "yaml" if path.endswith((".yaml", ".yml")) else "json"
    text = dump_pack(doc, fmt)
    if path == "-":
        sys.stdout.write(text)
        return
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    click.echo(f"exported {len(doc['effects'])} effects, {len(doc['observations'])} observations, "
               f"{len(doc['environments'])} environments to {out}")


@bank.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@db_option
def import_cmd(path: str, db: str | None) -> None:
    """Validate a pack completely, then add its records (idempotent: known records are skipped)."""
    from infrarsi.controller.experience.pack import import_pack

    n = import_pack(_store(db), path)
    click.echo(f"imported {n['effects']} new effects, {n['observations']} new observations "
               f"({n['environments']} environments) from {path}")


@bank.command("prune")
@click.option("--older-than", "older", help="Records created before this: 90d, 12w, 6h, or an ISO time (UTC).")
@click.option("--sku", help="Records measured on this GPU SKU.")
@click.option("--campaign", help="Records of this source campaign: label name#id, or a local campaign id.")
@db_option
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
def prune_cmd(older: str | None, sku: str | None, campaign: str | None, db: str | None, dry_run: bool) -> None:
    """Delete records by age, SKU or campaign (all given filters must match)."""
    from infrarsi.controller.cli.audit_cmd import parse_since

    if older is None and sku is None and campaign is None:
        raise click.UsageError("prune needs at least one of --older-than, --sku, --campaign")
    before: datetime | None = None
    if older is not None:
        try:
            before = parse_since(older)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--older-than") from None
    label, cid = (None, int(campaign)) if campaign is not None and campaign.isdigit() else (campaign, None)
    store = _store(db)
    if dry_run:
        effects = store.effects(gpu_sku=sku, campaign=label, campaign_id=cid, before=before)
        click.echo(f"would prune {len(effects)} effects (and their campaigns' matching observations)")
        return
    n = store.prune_experience(before=before, gpu_sku=sku, campaign=label, campaign_id=cid)
    click.echo(f"pruned {n['effects']} effects, {n['observations']} observations, {n['environments']} environments")
