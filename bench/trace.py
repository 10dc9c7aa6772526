"""Trial-by-trial trace of one seeded benchmark campaign: what the controller proposed, why, and what it got.

``bench/sweep.py`` says *which* seeds are slow; this says *why* one is.  It runs the same
:func:`infrarsi.controller.search.benchmark.simulate_campaign` as ``infrarsi bench search`` (so its trials and
trials-to-90 match the sweep's seed for seed) and prints one line per completed trial, in completion order:

    #  sub  wall_h  status    by        true   best   settings that differ from the reference

``#`` is the completion index (what trials-to-90 counts), ``sub`` the submission index, ``by`` the operator that
proposed it (the controller's ``proposed_by``; ``-`` for the baselines, which keep none), ``true`` the landscape's noise-free speedup of the trial and
``best`` that of the controller's best after it; a ``*`` marks the trial that reached 90% of the peak.

    python bench/trace.py quiet_node_levers --slots 8 --seed 0
    python bench/trace.py bench/landscapes/heldout_bert_unpad_a100.py --slots 4 --seed 12 --trials 32

With ``--source`` it traces the target campaign of ``infrarsi bench transfer`` instead: the source landscape's
campaign on the same seed is written back into a fresh bank, and the traced campaign starts from what ``--mode``
retrieves from it (the source campaign runs ``--source-trials``, 30 as in the transfer sweep, whatever
``--trials`` the traced campaign runs; the coverage grades are printed first):

    python bench/trace.py transfer_b200_qwen7b --source transfer_l40s_qwen7b --mode bank-filtered --trials 30

With ``--tune KEY=JSON`` (repeatable, as ``bench/sweep.py --tune``) it traces a variant of the controller's
``DEFAULT_TUNING``, so a sweep's slow seed under a variant can be traced without a snapshot:

    python bench/trace.py transfer_h200_gpt7b --slots 8 --seed 0 --tune ordered_chain=0.7 --tune ordered_chain_when=loss
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def trace(path: str, seed: int, slots: int, trials: int, strategy: str = "infrarsi",
          experience: list[dict] | None = None) -> list[dict[str, Any]]:
    """Run one campaign and return one row per completed trial (see the module docstring for the fields);
    ``experience``: retrieved records for the controller, as in the transfer benchmark."""
    from infrarsi.controller.search import benchmark
    from infrarsi.controller.search.landscape import load_landscape
    from infrarsi.controller.search.space import PATCH

    land = load_landscape(path)
    peak = land.peak_speedup()
    captured: list[Any] = []
    asked: dict[Any, int] = {}  # candidate -> submission index, for any strategy
    make = benchmark.make_strategy

    def capturing(*args: Any, **kwargs: Any) -> Any:
        strat = make(*args, **kwargs)
        ask = strat.ask

        def recording(*a: Any, **kw: Any) -> Any:
            got = ask(*a, **kw)
            for c in got:
                asked.setdefault(c, len(asked) + 1)
            return got

        strat.ask = recording  # this instance only; the class is untouched
        captured.append(strat)
        return strat

    benchmark.make_strategy = capturing
    try:
        camp = benchmark.simulate_campaign(land, strategy, seed, trials, 1, slots if slots > 1 else None,
                                           experience=experience)
    finally:
        benchmark.make_strategy = make
    by = getattr(captured[0], "proposed_by", {})  # the controller's operator per candidate; baselines have none
    target = 0.9 * math.log(peak) if peak > 1.0 else 0.0
    rows, hit = [], False
    result = camp.result
    for i, ((cand, out), best, wall) in enumerate(zip(result.trials, result.best_after, result.wall_after)):
        true = land.true_speedup(cand)
        best_sp = land.true_speedup(best) if best is not None else None
        reached = not hit and best_sp is not None and math.log(best_sp) >= target
        hit = hit or reached
        diff = sorted(f"{k}={v}" for k, v in cand.settings(land.space) if k != PATCH)  # non-reference settings
        diff += sorted(f"+{v}" for k, v in cand.settings(land.space) if k == PATCH)
        rows.append({"n": i + 1, "sub": asked[cand], "wall": camp.doctor_wall_hours + wall,
                     "status": out.status, "by": by.get(cand, "-"), "true": true, "best": best_sp,
                     "reached": reached, "settings": diff})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("landscape", help="a name in bench/landscapes or a path to a landscape file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slots", type=int, default=1, help="concurrent trials (1: one at a time)")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--strategy", default="infrarsi")
    p.add_argument("--source", help="trace a transfer target: the source landscape written back into the bank")
    p.add_argument("--mode", default="bank-filtered", help="with --source: cold, bank-all or bank-filtered")
    p.add_argument("--source-trials", type=int, default=30,
                   help="with --source: the source campaign's trials (30, as the transfer sweep)")
    p.add_argument("--tune", action="append", default=[], metavar="KEY=JSON",
                   help="trace the controller with this DEFAULT_TUNING override (repeatable), as sweep.py --tune")
    a = p.parse_args(argv)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from sweep import Refused, parse_tune

    from infrarsi.controller.search import controller

    try:
        tune = parse_tune(a.tune)
    except Refused as e:
        p.error(str(e))
    saved = dict(controller.DEFAULT_TUNING)
    controller.DEFAULT_TUNING.update(tune)
    try:
        return _print_trace(p, a)
    finally:  # main() may run in a process that goes on (a test): the overrides end with the trace
        controller.DEFAULT_TUNING.clear()
        controller.DEFAULT_TUNING.update(saved)


def _print_trace(p: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    where = lambda n: n if n.endswith(".py") else str(HERE / "landscapes" / f"{n}.py")  # noqa: E731
    path = where(a.landscape)
    experience = None
    if a.source:
        from infrarsi.controller.experience.transfer import MODES, source_experience
        from infrarsi.controller.search.landscape import load_landscape

        if a.mode not in MODES:
            p.error(f"--mode: unknown {a.mode!r}; choose from {', '.join(MODES)}")
        experience, grades = source_experience(load_landscape(where(a.source)), load_landscape(path), a.seed,
                                               a.source_trials, (a.mode,))[a.mode]
        print(f"{len(experience)} records; coverage " + " ".join(f"{k}={v}" for k, v in sorted(grades.items())))
    fmt = lambda x: "     -" if x is None else f"{x:6.3f}"  # noqa: E731
    for r in trace(path, a.seed, a.slots, a.trials, a.strategy, experience):
        print(f"{r['n']:3d} {r['sub']:4d} {r['wall']:7.3f}  {r['status']:8s} {r['by']:9.9s} {fmt(r['true'])} "
              f"{fmt(r['best'])}{'*' if r['reached'] else ' '} {' '.join(r['settings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
