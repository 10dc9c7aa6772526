"""The stage verbs run from a target repo: ``infrarsi init|doctor|run|report|apply``.

Without a server configured they drive the campaign in-process (SQLite under ``INFRARSI_HOME``, the local
executor); run again, they resume the same campaign where it stopped.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from infrarsi.controller.campaign.artifacts import report_dir
from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.campaign.runner import create_campaign, drive, executor_factory, find_campaign
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.experience.doctor import carried_rules
from infrarsi.controller.settings import CPU_RANKS_ENV, Settings
from infrarsi.controller.store import open_store
from infrarsi.controller.store.records import CampaignRecord
from infrarsi.controller.store.stage_records import doctor_of, result_of, scope_of

contract_arg = click.argument("contract", default="infrarsi.yaml", type=click.Path(dir_okay=False))
campaign_opt = click.option("--campaign", "campaign_id", type=int, metavar="N",
                            help="Campaign id, from any directory (default: this contract's newest).")


def _engine(quiet: bool = False) -> CampaignEngine:
    settings = Settings.from_env()
    store = open_store()
    echo = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    return CampaignEngine(store, settings, executor_factory(settings), progress=echo)


def _campaign(engine: CampaignEngine, contract: str, campaign_id: int | None, executor: str = "local",
              create: bool = True, new: bool = False, seed: int = 0) -> CampaignRecord:
    if campaign_id is not None:
        return campaign_by_id(engine, campaign_id, announce=create)
    found = None if new else find_campaign(engine.store, contract, include_terminal=not create)
    if found is not None:
        if create:
            click.echo(f"resuming campaign {found.id} ({found.state})", err=True)
        return found
    if not create:
        raise InfrarsiError(f"no campaign for {contract}: run 'infrarsi run {contract}' first")
    c = create_campaign(engine.store, engine.settings, contract, executor=executor, seed=seed)
    click.echo(f"campaign {c.id} created for {c.name} (workdir {c.workdir})", err=True)
    return c


def campaign_by_id(engine: CampaignEngine, campaign_id: int, announce: bool = False) -> CampaignRecord:
    """Campaign ``campaign_id`` from any working directory (its contract, repo and workdir are stored with it).

    InfrarsiError (one line) when there is no such campaign, or it belongs to someone else (on PostgreSQL: another
    database role; on SQLite: another OS user), whose campaign this process must not drive."""
    try:
        c = engine.store.get_campaign(campaign_id)
    except KeyError:
        raise InfrarsiError(f"no campaign {campaign_id} (see 'infrarsi campaign list')") from None
    me = engine.store.identity()
    if c.owner and c.owner != me:
        raise InfrarsiError(f"campaign {campaign_id} belongs to {c.owner}, not to you ({me})")
    if announce and not c.terminal:
        click.echo(f"resuming campaign {c.id} ({c.state}) of {c.contract_path}", err=True)
    return c


def _finish(c: CampaignRecord) -> None:
    if c.state == "failed":
        raise InfrarsiError(f"campaign {c.id} failed: {c.error}")
    if c.state == "cancelled":
        raise InfrarsiError(f"campaign {c.id} was cancelled: {c.error}")


@click.command("init")
@contract_arg
@click.option("--new", is_flag=True, help="Start a new campaign even if one exists for this contract.")
def init_cmd(contract: str, new: bool) -> None:
    """Lock the scope: frozen-file digests, editable files, contract digest, patch intake."""
    engine = _engine()
    c = drive(engine, _campaign(engine, contract, None, new=new).id, until="doctor")
    _finish(c)
    scope = scope_of(c)
    click.echo(f"campaign {c.id}: scope locked at {scope.commit[:10]} "
               f"({len(scope.frozen)} frozen, {len(scope.editable)} editable, "
               f"{len(scope.patches)} patches, {len(scope.refused_patches)} refused)")


@click.command("doctor")
@contract_arg
@campaign_opt
def doctor_cmd(contract: str, campaign_id: int | None) -> None:
    """Run the reference repeats: noise sigma_pair, promotion margin and the phase breakdown."""
    engine = _engine()
    c = drive(engine, _campaign(engine, contract, campaign_id).id, until="run")
    _finish(c)
    d = doctor_of(c)
    click.echo(f"campaign {c.id}: reference {d.t0 * 1000:.2f} ms/update, sigma_pair {d.sigma_pair:.4f}, "
               f"promotion margin {d.promotion_margin * 100:.2f}%")
    cov = d.experience_coverage or {}
    click.echo(f"  experience bank: {len(cov.get('knobs', []))}/{cov.get('of', 0)} searched knobs have verified "
               f"records ({', '.join(cov.get('knobs', [])) or 'none'})")
    for knob, grade in sorted((cov.get("grades") or {}).items()):  # covered | partial | null | unobserved
        click.echo(f"    {knob:<24} {grade}")
    for line in cov.get("pooled") or ():  # two values of one knob under one canonical value (contract check)
        click.echo(f"    pooled: {line} (their records are one; give one its own value under canonical:)")
    for rule in carried_rules(d.experience):  # known conflicts, suspects, requirements from other campaigns
        click.echo(f"    rule: {rule}")
    total = sum(d.phases.values()) or 1.0
    for k, v in sorted(d.phases.items(), key=lambda kv: -kv[1]):
        click.echo(f"  {k:<10} {v * 1000:8.2f} ms  {v / total * 100:5.1f}%")


@click.command("run")
@contract_arg
@campaign_opt
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local", show_default=True)
@click.option("--new", is_flag=True, help="Start a new campaign even if one exists for this contract.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--drain-after", type=float, default=None, metavar="SECONDS",
              help="Stop launching trials after SECONDS, finish the live ones and exit (resume by running again).")
@click.option("--cpu-ranks", type=click.IntRange(1, 64), default=None, metavar="N",
              help="CPU smoke of a torchrun contract: N gloo ranks on the CPU, no GPU (sets INFRARSI_CPU_RANKS).")
def run_cmd(contract: str, campaign_id: int | None, executor: str, new: bool, seed: int,
            drain_after: float | None, cpu_ranks: int | None) -> None:
    """Run the whole campaign in-process (init, doctor, search, back-to-back verification, report).

    Resumes this contract's unfinished campaign, or campaign N with --campaign N from any directory (its contract,
    repository and workdir are stored with it).  --drain-after stops launching and exits once the live trials are
    in, but never between finished verification and the report.  --cpu-ranks N runs a torchrun contract's
    trials as N CPU processes (the script picks the gloo backend when CUDA is absent)."""
    if cpu_ranks is not None:
        os.environ[CPU_RANKS_ENV] = str(cpu_ranks)
    engine = _engine()
    c = drive(engine, _campaign(engine, contract, campaign_id, executor=executor, new=new, seed=seed).id,
              drain_after_s=drain_after)
    _finish(c)
    if c.state != "done":
        click.echo(f"campaign {c.id} paused in state {c.state}: run the same command again, or "
                   f"'infrarsi run --campaign {c.id}' from any directory, to resume")
        return
    rd = report_dir(c)
    click.echo(f"campaign {c.id} done: delivered speedup {c.delivered_speedup:.3f}x "
               f"({(result_of(c).promotion or {}).get('reason', '')})")
    click.echo(f"report: {rd / 'REPORT.md'}")


@click.command("report")
@contract_arg
@campaign_opt
@click.option("--regenerate", is_flag=True, help="Re-render the artifacts from the store first.")
@click.option("--path", "path_only", is_flag=True, help="Print only the report's path.")
def report_cmd(contract: str, campaign_id: int | None, regenerate: bool, path_only: bool) -> None:
    """Print REPORT.md of the campaign (result.json, pack.yaml and progress.png lie beside it)."""
    engine = _engine()
    c = _campaign(engine, contract, campaign_id, create=False)
    rd = report_dir(c)
    if regenerate or not (rd / "REPORT.md").exists():
        if result_of(c).promotion is None:
            raise InfrarsiError(f"campaign {c.id} is in state {c.state}: nothing to report yet")
        engine.write_report(c)
    click.echo(str(rd / "REPORT.md") if path_only else (rd / "REPORT.md").read_text())


@click.command("apply")
@contract_arg
@campaign_opt
@click.option("--branch", help="Create this git branch and commit the change there.")
def apply_cmd(contract: str, campaign_id: int | None, branch: str | None) -> None:
    """Write the promoted launch configuration and source diffs into the target repo."""
    from infrarsi.controller.campaign.apply import apply_result, load_result

    engine = _engine()
    c = _campaign(engine, contract, campaign_id, create=False)
    rd = report_dir(c)
    result = load_result(rd)
    out = apply_result(Path(c.repo_path), scope_of(c), result, (rd / "pack.yaml").read_text(), branch)
    engine.store.add_event("campaign.applied", {"branch": branch, "files": out["files"]}, campaign_id=c.id)
    where = f"on branch {branch}" if branch else "in the working tree"
    click.echo(f"applied campaign {c.id} ({out['speedup']:.3f}x) {where}: {', '.join(out['files'])}")
