"""Per-seed sweep of the search benchmark over many landscapes and slot counts, in parallel.

``infrarsi bench search`` prints medians for one landscape; tuning the controller needs the per-seed
trials-to-90 of every cell, before and after a change, and issue 15's criterion checked against the peers.
This script runs the same :func:`infrarsi.controller.search.benchmark.run_repeat` per (landscape, slots,
strategy, seed) in a process pool, writes one JSON file, and can compare two such files or check the
criterion.  The numerics are CPU-independent, so files from different machines compare seed by seed.

    # run (every landscape in bench/landscapes, slots 1/4/8, 30 seeds, infrarsi only)
    python bench/sweep.py run --strategy infrarsi --slots 1,4,8 --repeats 30 --jobs 2 --out /tmp/after.json
    # a change that only acts with six or more trials busy: sweep slots 8, take the rest from the baseline
    python bench/sweep.py run --slots 8 --repeats 30 --fill-from bench/results/infrarsi-30.json --out /tmp/s8.json
    # per-cell medians and per-seed faster/slower of AFTER against BEFORE, and a sign test over every cell
    python bench/sweep.py compare /tmp/before.json /tmp/after.json
    # a variant behind a tuning key, against the stored sweep of this code's defaults (paired by seed)
    python bench/sweep.py run --slots 4,8 --tune common_factor=false --out /tmp/off.json
    python bench/sweep.py compare bench/results/infrarsi-30.json /tmp/off.json
    # issue 15's "done when" for infrarsi in AFTER, against peers in PEERS (a sweep file with the peers)
    python bench/sweep.py criterion /tmp/after.json --peers bench/results/peers-30.json
    # how sure each verdict is: resample the 30 seeds 1,000 times (the same seeds for every cell) and name the
    # cells whose verdict follows the draw; a variant whose count stays inside the baseline's 5th-95th band has
    # not been shown to differ from it
    python bench/sweep.py criterion /tmp/after.json --bootstrap 1000
    # the transfer benchmark's directions (DIRECTIONS), every mode, per seed; issue 13's criterion
    python bench/sweep.py transfer --repeats 30 --jobs 2 --out /tmp/transfer.json
    python bench/sweep.py transfer-criterion /tmp/transfer.json [--bootstrap 1000]
    # one direction only, the other seven from a baseline transfer sweep
    python bench/sweep.py transfer --directions transfer_h100_mixtral->transfer_h20_mixtral \\
        --fill-from /tmp/transfer.json --out /tmp/t1.json

File format: ``{"trials": T, "cells": {"<landscape>/<slots>/<strategy>": [score per seed]}}`` where a score is
``{"seed", "t90", "w90", "final", "false"}`` (``t90``/``w90`` null when 90% was never reached).  A peers file
may instead hold medians: ``{"<landscape>/<slots>/<strategy>": {"t90", "w90", "final"}}`` under ``"medians"``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = ("random", "greedy", "optuna-tpe")


def _one(args: tuple[str, str, int, int, int]) -> tuple[str, dict]:
    path, strategy, slots, seed, trials = args
    from infrarsi.controller.search.benchmark import run_repeat
    from infrarsi.controller.search.landscape import load_landscape

    land = load_landscape(path)
    s = run_repeat(land, strategy, seed, trials, land.peak_speedup(), 1, slots)
    key = f"{Path(path).stem}/{slots}/{strategy}"
    return key, {"seed": seed, "t90": s.trials_to_90, "w90": s.wall_hours_to_90, "final": s.final_speedup,
                 "false": s.false_promotion}


#: the transfer directions of bench/RESULTS.md (source, target), both ways for every pair
DIRECTIONS = tuple((a, b) for x, y in (("transfer_h20_gpt7b", "transfer_h200_gpt7b"),
                                       ("transfer_h20_llama8b", "transfer_h100_llama8b"),
                                       ("transfer_h20_mixtral", "transfer_h100_mixtral"),
                                       ("transfer_l40s_qwen7b", "transfer_b200_qwen7b"),
                                       ("transfer_h20_neox20b", "transfer_h100_neox20b"),
                                       ("transfer_h20_yi34b", "transfer_h200_yi34b"),
                                       ("transfer_a100_phi14b", "transfer_h100_phi14b"),
                                       ("transfer_h200_gemma9b", "transfer_l40s_gemma9b"),
                                       ("transfer_a100_starcoder15b", "transfer_h100_starcoder15b"),
                                       ("transfer_a100_olmo13b", "transfer_h200_olmo13b"))
                   for a, b in ((x, y), (y, x)))


def _one_transfer(args: tuple[str, str, int, int]) -> list[tuple[str, dict]]:
    source, target, seed, trials = args
    from infrarsi.controller.experience.transfer import MODES, run_transfer
    from infrarsi.controller.search.landscape import load_landscape

    res = run_transfer(load_landscape(HERE / "landscapes" / f"{source}.py"),
                       load_landscape(HERE / "landscapes" / f"{target}.py"), tuple(MODES), trials=trials,
                       repeats=1, seed0=seed)
    return [(f"{source}->{target}/{mode}", {"seed": seed, "t90": m["median_trials_to_90"], "w90": None,
                                              "final": m["median_final_speedup"], "false": m["false_promotions"]})
            for mode, m in res["modes"].items()]


def _median(xs: list[float | None]) -> float | None:
    m = statistics.median(math.inf if x is None else float(x) for x in xs)
    return None if math.isinf(m) else m


def medians(doc: dict) -> dict[str, dict[str, Any]]:
    """Per-cell medians of a sweep file (or the medians a peers file states)."""
    out = dict(doc.get("medians", {}))
    for key, scores in doc.get("cells", {}).items():
        out[key] = {"t90": _median([s["t90"] for s in scores]), "w90": _median([s["w90"] for s in scores]),
                    "final": statistics.median(s["final"] for s in scores),
                    "false": sum(bool(s["false"]) for s in scores), "n": len(scores)}
    return out


def _pool(a: argparse.Namespace, fn: Any, jobs: list, unit: str, every: int,
          base: dict[str, list[dict]] | None = None) -> int:
    """Run ``fn`` over ``jobs`` in ``a.jobs`` processes (each returns one ``(cell, score)`` or a list of them),
    report progress on stderr, and write the sweep file ``a.out`` with every cell's scores in seed order; cells of
    ``base`` that this sweep does not run are copied into it unchanged."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    tune = parse_tune(a.tune)
    cells: dict[str, list[dict]] = {}
    t0 = time.monotonic()
    with ProcessPoolExecutor(a.jobs, initializer=_apply_tune, initargs=(tune,)) as pool:
        for i, rows in enumerate(pool.map(fn, jobs, chunksize=1), 1):
            for key, score in rows if isinstance(rows, list) else [rows]:
                cells.setdefault(key, []).append(score)
            if i % every == 0 or i == len(jobs):
                print(f"{i}/{len(jobs)} {unit}, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    for scores in cells.values():
        scores.sort(key=lambda s: s["seed"])
    copied = {k: v for k, v in (base or {}).items() if k not in cells}
    cells.update(copied)
    if copied:
        print(f"copied {len(copied)} cells this sweep does not run from the baseline")
    doc: dict[str, Any] = {"trials": a.trials, "cells": cells}
    if tune:
        doc["tune"] = tune
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cells)} cells, {len(jobs)} {unit} to {a.out}")
    return 0


def parse_tune(pairs: list[str]) -> dict[str, Any]:
    """``KEY=JSON`` overrides of the controller's ``DEFAULT_TUNING`` (a bare word is a string).  Raises
    :class:`Refused` for a key the controller does not know or a pair without ``=``."""
    from infrarsi.controller.search.controller import DEFAULT_TUNING

    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq:
            raise Refused(f"--tune {pair!r}: expected KEY=VALUE")
        if key not in DEFAULT_TUNING:
            raise Refused(f"--tune {key}: not a tuning key (known: {', '.join(sorted(DEFAULT_TUNING))})")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _apply_tune(tune: dict[str, Any]) -> None:
    """Pool initializer: every controller this worker builds starts from ``DEFAULT_TUNING`` with ``tune``."""
    from infrarsi.controller.search import controller

    controller.DEFAULT_TUNING.update(tune)


def cmd_run(a: argparse.Namespace) -> int:
    names = a.landscapes.split(",") if a.landscapes else sorted(p.stem for p in (HERE / "landscapes").glob("*.py"))
    paths = [str(HERE / "landscapes" / f"{n}.py") for n in names]
    jobs = [(p, st, int(sl), a.seed0 + r, a.trials) for p in paths for sl in a.slots.split(",")
            for st in a.strategy.split(",") for r in range(a.repeats)]
    return _pool(a, _one, jobs, "runs", every=100, base=_base(a))


class Refused(ValueError):
    """A sweep that must not run; :func:`main` prints its message on stderr and returns 2, writing nothing."""


def _base(a: argparse.Namespace) -> dict[str, list[dict]] | None:
    """The cells of ``--fill-from`` (None without one).  Raises :class:`Refused` for a baseline run with another
    trial budget (its cells would not compare with this sweep's)."""
    if not a.fill_from:
        return None
    doc = json.loads(Path(a.fill_from).read_text())
    if doc.get("trials") != a.trials:
        raise Refused(f"{a.fill_from} was run with {doc.get('trials')} trials, not {a.trials}")
    return doc["cells"]


def cmd_transfer(a: argparse.Namespace) -> int:
    directions = list(DIRECTIONS)
    if a.directions:
        wanted = [tuple(d.split("->")) for d in a.directions.split(",")]
        unknown = [d for d in wanted if d not in DIRECTIONS]
        if unknown:
            raise Refused(f"unknown direction {'->'.join(unknown[0])} (known: "
                          f"{', '.join(s + '->' + t for s, t in DIRECTIONS)})")
        directions = wanted
    base = _base(a)
    jobs = [(src, tgt, a.seed0 + r, a.trials) for src, tgt in directions for r in range(a.repeats)]
    return _pool(a, _one_transfer, jobs, "repeats", every=20, base=base)


def transfer_verdicts(m: dict[str, dict[str, Any]]) -> list[tuple[str, bool, dict[str, dict[str, Any]]]]:
    """Issue 13 per direction of DIRECTIONS in ``m`` (medians): ``[(direction, holds, {mode: medians})]``;
    holds when bank-filtered reaches 90% in fewer median trials than cold and than bank-all, with no false
    promotion in any mode."""
    inf = lambda x: math.inf if x is None else x  # noqa: E731
    out = []
    for src, tgt in DIRECTIONS:
        row = {mode: m.get(f"{src}->{tgt}/{mode}") for mode in ("cold", "bank-all", "bank-filtered")}
        if any(v is None for v in row.values()):
            continue
        f = row["bank-filtered"]
        ok = inf(f["t90"]) < inf(row["cold"]["t90"]) and inf(f["t90"]) < inf(row["bank-all"]["t90"]) \
            and not any(v["false"] for v in row.values())
        out.append((f"{src} -> {tgt}", ok, row))
    return out


def cmd_transfer_criterion(a: argparse.Namespace) -> int:
    """Issue 13 (:func:`transfer_verdicts`); with ``--bootstrap``, how sure each verdict is."""
    doc = json.loads(Path(a.sweep).read_text())
    got = transfer_verdicts(medians(doc))
    for direction, ok, row in got:
        f = row["bank-filtered"]
        print(f"{'holds' if ok else 'MISS '} {direction}: cold {_fmt(row['cold']['t90'])}, bank-all "
              f"{_fmt(row['bank-all']['t90'])}, filtered {_fmt(f['t90'])} (finals {row['cold']['final']:.3f} / "
              f"{row['bank-all']['final']:.3f} / {f['final']:.3f}; false "
              f"{sum(v['false'] for v in row.values())})")
    held = sum(ok for _, ok, _ in got)
    print(f"{held} of {len(got)} directions hold" + (f" ({len(DIRECTIONS) - len(got)} not in the file)"
                                                    if len(got) < len(DIRECTIONS) else ""))
    if a.bootstrap:
        _report_bootstrap(doc, lambda m: [(d, ok) for d, ok, _ in transfer_verdicts(m)], a.bootstrap,
                          "directions hold")
    return 0


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:g}"


def cmd_compare(a: argparse.Namespace) -> int:
    before, after = (json.loads(Path(p).read_text()) for p in (a.before, a.after))
    mb, ma = medians(before), medians(after)
    changed = all_faster = all_slower = 0
    for key in sorted(ma):
        if key not in mb:
            continue
        b, c = mb[key], ma[key]
        faster = slower = 0
        if "cells" in before and key in before["cells"]:
            seeds_b = {s["seed"]: s["t90"] for s in before["cells"][key]}
            for s in after["cells"][key]:
                if s["seed"] in seeds_b:
                    tb = math.inf if seeds_b[s["seed"]] is None else seeds_b[s["seed"]]
                    ta = math.inf if s["t90"] is None else s["t90"]
                    faster += ta < tb
                    slower += ta > tb
        all_faster += faster
        all_slower += slower
        same = b["t90"] == c["t90"] and abs(b["final"] - c["final"]) < 5e-4 and faster == slower == 0
        if same and not a.all:
            continue
        changed += not same
        print(f"{key:55s} t90 {_fmt(b['t90']):>5} -> {_fmt(c['t90']):>5}  final {b['final']:.3f} -> "
              f"{c['final']:.3f}  seeds faster/slower {faster}/{slower}  false {b.get('false', 0)} -> "
              f"{c.get('false', 0)}")
    print(f"{changed} of {len(set(ma) & set(mb))} cells differ")
    if all_faster + all_slower:
        n = all_faster + all_slower
        z = (all_faster - all_slower) / math.sqrt(n)  # sign test: under no effect, faster ~ Binomial(n, 1/2)
        print(f"paired seeds over every cell: {all_faster} faster, {all_slower} slower (sign test z = {z:+.1f}; "
              f"|z| < 2 is no evidence either way)")
    return 0


def search_verdicts(ours: dict[str, dict[str, Any]],
                    peers: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Issue 15's criterion per (landscape, slots 4 or 8) cell of ``ours`` (medians, as :func:`medians` gives):
    ``[(cell, status, why)]`` where the status is ``"hold"``, ``"floor"`` (fails only on wall hours) or
    ``"miss"``, and ``why`` names the failed conditions.  At slots 4 and 8, infrarsi's median trials to 90 <= 1.5x its slots-1 figure and below every
    peer's, its final >= every peer's, wall hours to 90 fall as slots grow, no false promotion.  Where neither
    this nor the smaller slot count reaches 90% (a landscape whose right answer is the reference), the trials
    and wall conditions hold trivially and the final and false-promotion conditions decide."""
    inf = lambda x: math.inf if x is None else x  # noqa: E731
    out: list[tuple[str, str, str]] = []
    for land in sorted({k.split("/")[0] for k in ours}):
        one = ours.get(f"{land}/1/infrarsi")
        if one is None:
            continue
        prev_wall = inf(one["w90"])
        for slots in (4, 8):
            me = ours.get(f"{land}/{slots}/infrarsi")
            if me is None:
                continue
            why, wall_only = [], True
            if inf(me["t90"]) > 1.5 * inf(one["t90"]):
                why.append(f"trials {_fmt(me['t90'])} > 1.5x{_fmt(one['t90'])}")
                wall_only = False
            for p in PEERS:
                other = peers.get(f"{land}/{slots}/{p}")
                if other is None:
                    continue
                if other["t90"] is not None and inf(me["t90"]) >= other["t90"]:
                    why.append(f"trials {_fmt(me['t90'])} !< {p} {_fmt(other['t90'])}")
                    wall_only = False
                if me["final"] < other["final"] - 5e-4:
                    why.append(f"final {me['final']:.4f} < {p} {other['final']:.4f}")
                    wall_only = False
            if me.get("false"):
                why.append(f"{me['false']} false promotions")
                wall_only = False
            if not inf(me["w90"]) < prev_wall and not (me["w90"] is None and math.isinf(prev_wall)):
                why.append(f"wall {_fmt(me['w90'])} !< {_fmt(None if math.isinf(prev_wall) else prev_wall)}")
            prev_wall = inf(me["w90"])
            status = "hold" if not why else "floor" if wall_only else "miss"
            out.append((f"{land} s{slots}", status, "; ".join(why)))
    return out


def cmd_criterion(a: argparse.Namespace) -> int:
    """Issue 15 (:func:`search_verdicts`) on the sweep's medians; with ``--bootstrap``, how sure each verdict is."""
    doc = json.loads(Path(a.sweep).read_text())
    peers = medians(json.loads(Path(a.peers).read_text())) if a.peers else {}
    got = search_verdicts(medians(doc), peers)
    for cell, status, why in got:
        if status != "hold":
            print(f"{'floor ' if status == 'floor' else 'MISS  '} {cell}: {why}")
    count = {s: sum(st == s for _, st, _ in got) for s in ("hold", "floor", "miss")}
    print(f"{count['hold']} hold, {count['floor']} fail only on wall hours, {count['miss']} miss")
    if a.bootstrap:
        _report_bootstrap(doc, lambda m: [(c, st == "hold") for c, st, _ in search_verdicts(m, peers)],
                          a.bootstrap, "cells hold")
    return 0


def resampled(doc: dict, rng: random.Random) -> dict[str, dict[str, Any]]:
    """The medians of ``doc`` over one bootstrap resample of its seeds: the same seeds (drawn with replacement,
    as many as the file has) for every cell, so cells that share a seed (slots 1 and 8 of a landscape, a
    direction's three modes) stay paired.  A cell takes the drawn seeds it has (all its scores if it has none)."""
    seeds = sorted({s["seed"] for scores in doc["cells"].values() for s in scores})
    drawn = [rng.choice(seeds) for _ in seeds]
    cells = {}
    for key, scores in doc["cells"].items():
        by = {s["seed"]: s for s in scores}
        cells[key] = [by[s] for s in drawn if s in by] or scores
    return medians({"cells": cells, "medians": doc.get("medians", {})})


def _report_bootstrap(doc: dict, verdicts: Any, n: int, what: str) -> None:
    """Print how often each cell's verdict holds over ``n`` seed resamples (:func:`resampled`), the cells whose
    verdict is not settled (held in more than 5% and fewer than 95% of resamples), and the spread of the number
    that hold.  ``verdicts``: medians -> [(cell, holds)].  Only this file's seeds are resampled (a peers file of
    medians stays as it is)."""
    rng = random.Random(0)
    counts: dict[str, int] = {}
    totals = []
    for _ in range(n):
        got = verdicts(resampled(doc, rng))
        for cell, ok in got:
            counts[cell] = counts.get(cell, 0) + ok
        totals.append(sum(ok for _, ok in got))
    totals.sort()
    settled_hold = sum(c >= 0.95 * n for c in counts.values())
    settled_miss = sum(c <= 0.05 * n for c in counts.values())
    print(f"bootstrap over {n} seed resamples: {what} {totals[len(totals) // 2]} in the median resample, "
          f"{totals[int(0.05 * n)]} to {totals[min(n - 1, int(0.95 * n))]} (5th-95th percentile); "
          f"{settled_hold} hold in >= 95% of resamples, {settled_miss} in <= 5%, "
          f"{len(counts) - settled_hold - settled_miss} unsettled:")
    for cell in sorted(counts, key=lambda c: (-counts[c], c)):
        if 0.05 * n < counts[cell] < 0.95 * n:
            print(f"  {cell}: holds in {100 * counts[cell] / n:.0f}%")


def _pool_arguments(p: argparse.ArgumentParser, trials: int) -> None:
    """The options every sweep that runs a pool takes (what :func:`_pool` reads)."""
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--trials", type=int, default=trials)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", required=True)
    p.add_argument("--tune", action="append", default=[], metavar="KEY=JSON",
                   help="run the controller with this DEFAULT_TUNING override (repeatable): a variant to compare "
                        "against a sweep of the defaults, with no snapshot or code change")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--strategy", default="infrarsi")
    r.add_argument("--slots", default="1,4,8")
    r.add_argument("--landscapes", default="", help="comma-separated stems; default: all of bench/landscapes")
    _pool_arguments(r, trials=32)
    r.add_argument("--fill-from", default="", metavar="SWEEP",
                   help="copy the cells this run does not sweep from SWEEP (e.g. only --slots 8 changed)")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--all", action="store_true", help="print unchanged cells too")
    k = sub.add_parser("criterion")
    k.add_argument("sweep")
    k.add_argument("--peers", default=str(HERE / "results" / "peers-30.json"))
    k.add_argument("--bootstrap", type=int, default=0, metavar="N",
                   help="also resample the seeds N times and say how sure each cell's verdict is")
    t = sub.add_parser("transfer", help="every direction of DIRECTIONS (or --directions), every mode, per seed")
    _pool_arguments(t, trials=30)
    t.add_argument("--directions", default="", metavar="SRC->TGT,...",
                   help="comma-separated directions of DIRECTIONS, by landscape stem; default: all of them")
    t.add_argument("--fill-from", default="", metavar="SWEEP",
                   help="copy the directions this run does not sweep from SWEEP (a transfer sweep file)")
    tc = sub.add_parser("transfer-criterion")
    tc.add_argument("sweep")
    tc.add_argument("--bootstrap", type=int, default=0, metavar="N",
                    help="also resample the seeds N times and say how sure each direction's verdict is")
    a = ap.parse_args(argv)
    try:
        return {"run": cmd_run, "compare": cmd_compare, "criterion": cmd_criterion, "transfer": cmd_transfer,
                "transfer-criterion": cmd_transfer_criterion}[a.cmd](a)
    except Refused as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
