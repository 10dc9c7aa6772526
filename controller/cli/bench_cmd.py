"""``infrarsi bench``: benchmarks.  ``bench search`` compares search strategies on a landscape file."""

from __future__ import annotations

import json

import click

from infrarsi.controller.errors import InfrarsiError


@click.group()
def bench() -> None:
    """Benchmarks (search strategies on simulated landscapes)."""


@bench.command("search")
@click.option("--landscape", "landscape_path", required=True, type=click.Path(dir_okay=False),
              help="Landscape Python file (see bench/README.md).")
@click.option("--strategy", "strategies", default="infrarsi,random,greedy,optuna-tpe", show_default=True,
              help="Comma-separated strategies.")
@click.option("--trials", default=30, show_default=True, type=click.IntRange(1), help="Trial budget per search.")
@click.option("--repeats", default=20, show_default=True, type=click.IntRange(1), help="Seeded repeats per strategy.")
@click.option("--q", "q", default=1, show_default=True, type=click.IntRange(1), help="Candidates per batch (free GPU slots).")
@click.option("--slots", default=None, type=click.IntRange(1),
              help="Asynchronous search with this many concurrent trials (a free slot is refilled at once); "
                   "excludes --q.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the first repeat.")
@click.option("--priors", "priors", default=None,
              help="Comma-separated simulated-proposer prior modes (none, calibrated, miscalibrated): each infrarsi "
                   "strategy runs once per mode with those knob, memory and patch priors instead of the landscape's.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def search_cmd(landscape_path: str, strategies: str, trials: int, repeats: int, q: int, slots: int | None, seed: int,
               priors: str | None, as_json: bool) -> None:
    """Run each strategy REPEATS times on a landscape and report trials-to-90%, final speedup, false promotions."""
    from infrarsi.controller.search.benchmark import run_benchmark
    from infrarsi.controller.search.landscape import load_landscape
    from infrarsi.controller.search.strategies import STRATEGIES

    names = [s.strip() for s in strategies.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES]
    if not names or bad:
        raise InfrarsiError(f"--strategy: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(STRATEGIES)}")
    if slots is not None and q != 1:
        raise InfrarsiError("--slots and --q exclude each other (asynchronous slots or synchronous rounds)")
    from infrarsi.controller.search.simulated_proposer import PRIOR_MODES

    modes = [m.strip() for m in (priors or "").split(",") if m.strip()]
    bad_modes = [m for m in modes if m not in PRIOR_MODES]
    if priors is not None and (not modes or bad_modes):
        raise InfrarsiError(f"--priors: unknown {', '.join(bad_modes) or '(empty)'}; choose from {', '.join(PRIOR_MODES)}")
    land = load_landscape(landscape_path)
    res = run_benchmark(land, names, trials=trials, repeats=repeats, q=q, seed0=seed, slots=slots, priors=modes)
    if as_json:
        click.echo(json.dumps(res, sort_keys=False))
        return
    mode = f"slots {slots} (async)" if slots is not None else f"q {q}"
    click.echo(f"landscape {res['landscape']}: peak {res['peak_speedup']:.4f}x, {trials} trials, {repeats} repeats, {mode}")
    width = max([12] + [len(n) for n in res["strategies"]])
    click.echo(f"{'strategy':<{width}} {'trials->90':>10} {'GPUh->90':>9} {'wallh->90':>9} {'final':>7} {'false':>6} "
               f"{'ooms':>5} {'crashes':>7}")
    for name, s in res["strategies"].items():
        t90 = "-" if s["median_trials_to_90"] is None else f"{s['median_trials_to_90']:g}"
        h90 = "-" if s["median_gpu_hours_to_90"] is None else f"{s['median_gpu_hours_to_90']:.2f}"
        w90 = "-" if s["median_wall_hours_to_90"] is None else f"{s['median_wall_hours_to_90']:.2f}"
        click.echo(f"{name:<{width}} {t90:>10} {h90:>9} {w90:>9} {s['median_final_speedup']:>7.4f} {s['false_promotions']:>6} "
                   f"{s['ooms']:>5} {s['crashes']:>7}")


@bench.command("transfer")
@click.option("--source", "source_path", required=True, type=click.Path(dir_okay=False),
              help="Source landscape (its campaign writes the bank); needs ENVIRONMENT.")
@click.option("--target", "target_path", required=True, type=click.Path(dir_okay=False),
              help="Target landscape (searched once per mode); needs ENVIRONMENT.")
@click.option("--modes", default="cold,bank-all,bank-filtered", show_default=True,
              help="Comma-separated: cold (empty bank), bank-all (every record, no scope or distance), "
                   "bank-filtered (scope check, distance, ranking).")
@click.option("--trials", default=30, show_default=True, type=click.IntRange(1), help="Trial budget per search.")
@click.option("--repeats", default=20, show_default=True, type=click.IntRange(1), help="Seeded repeats.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the first repeat.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def transfer_cmd(source_path: str, target_path: str, modes: str, trials: int, repeats: int, seed: int,
                 as_json: bool) -> None:
    """Per repeat: a source campaign with verified write-back into a fresh bank, then the target in each mode."""
    from infrarsi.controller.experience.transfer import MODES, run_transfer
    from infrarsi.controller.search.landscape import load_landscape

    names = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in names if m not in MODES]
    if not names or bad:
        raise InfrarsiError(f"--modes: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(MODES)}")
    res = run_transfer(load_landscape(source_path), load_landscape(target_path), names, trials=trials,
                       repeats=repeats, seed0=seed)
    if as_json:
        click.echo(json.dumps(res, sort_keys=False))
        return
    click.echo(f"{res['source']} -> {res['target']}: peak {res['peak_speedup']:.4f}x, {trials} trials, "
               f"{repeats} repeats")
    click.echo(f"{'mode':<14} {'trials->90':>10} {'GPUh->90':>9} {'final':>7} {'false':>6}")
    for name, s in res["modes"].items():
        t90 = "-" if s["median_trials_to_90"] is None else f"{s['median_trials_to_90']:g}"
        h90 = "-" if s["median_gpu_hours_to_90"] is None else f"{s['median_gpu_hours_to_90']:.2f}"
        click.echo(f"{name:<14} {t90:>10} {h90:>9} {s['median_final_speedup']:>7.4f} {s['false_promotions']:>6}")
