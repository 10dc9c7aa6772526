"""``infrarsi finops``: the finance views as tables, JSON or CSV."""

from __future__ import annotations

import click

from infrarsi.controller.cli.output import emit
from infrarsi.controller.store import open_store
from infrarsi.controller.store.sql import FINOPS_VIEWS


@click.command()
@click.argument("view", type=click.Choice(sorted(FINOPS_VIEWS)), default="campaign_cost")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
def finops(view: str, fmt: str) -> None:
    """Print a finance view: failed (failed-trial GPU-hours by campaign, user, partition, stage, failure class),
    campaign_cost (total cost per campaign, failures included), cost_per_pct (GPU-hours per verified % speedup)."""
    emit(open_store().finops(view), fmt)
