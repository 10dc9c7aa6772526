"""Which requirements ("s needs r") each transfer landscape's campaigns write back, and which of them retrieval
carries (``filtered``) to a campaign in the same environment.

    python bench/requirements_scan.py [--seeds 10] [--trials 30] [LANDSCAPE.py ...]

Prints one block per landscape with an ``ENVIRONMENT`` (default: every one under bench/landscapes/): the written
requirements in mechanism terms with the number of seeds whose campaign wrote each, then the carried ones (target
knob names) with the number of seeds that carried each.  See bench/RESULTS.md, session 14.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from infrarsi.controller.experience import transfer as T
from infrarsi.controller.experience.requirements import requirements
from infrarsi.controller.search.benchmark import simulate_campaign
from infrarsi.controller.search.landscape import load_landscape

HERE = Path(__file__).resolve().parent


def scan(path: Path, seeds: int, trials: int) -> tuple[Counter, Counter]:
    """(written, carried) counts over ``seeds`` source campaigns of the landscape at ``path``."""
    land = load_landscape(path)
    knobs = T.landscape_knobs(land)
    env = T.landscape_environment(land, knobs)
    written: Counter = Counter()
    carried: Counter = Counter()
    for seed in range(seeds):
        e, obs, _ = T.campaign_records(land, simulate_campaign(land, "infrarsi", seed, trials), f"s{seed}")
        written.update({r for o in obs for r in o.requirements})
        carried.update({str(r["requires"]) for r in requirements(obs, {e.digest(): e}, env, knobs, "filtered")})
    return written, carried


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("landscapes", nargs="*", type=Path)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=30)
    a = ap.parse_args(argv)
    paths = a.landscapes or sorted((HERE / "landscapes").glob("*.py"))
    for p in paths:
        if "ENVIRONMENT" not in p.read_text():
            continue
        written, carried = scan(p, a.seeds, a.trials)
        print(f"{p.stem}: written {dict(written) or '{}'}")
        print(f"  carried {dict(carried) or '{}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
