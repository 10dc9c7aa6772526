"""Isolation overhead per trial: wall time of the exec wrapper running a trivial python job with and without
bubblewrap, interleaved, N runs each; prints the medians in ms.

    python3 bench/bench_isolation.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(root: Path, mode: str, i: int) -> float:
    """Seconds for one ``python -I -m infrarsi.verifier.exec --isolation MODE -- python -c pass``."""
    src, scratch, out = root / f"{mode}{i}" / "src", root / f"{mode}{i}" / "scratch", root / f"{mode}{i}" / "out"
    for d in (src, scratch, out):
        d.mkdir(parents=True)
    cmd = [sys.executable, "-I", "-m", "infrarsi.verifier.exec", "--trial-id", f"b{i}", "--out", str(out), "--quiet",
           "--src", str(src), "--scratch", str(scratch), "--isolation", mode, "--max-updates", "10",
           "--disk-limit-gib", "20", "--", sys.executable, "-c", "pass"]
    t0 = time.perf_counter()
    cp = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"bench: {mode} run failed: {cp.stderr.strip()}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ns = ap.parse_args()
    times: dict[str, list[float]] = {"none": [], "bwrap": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(ns.runs):
            for mode in ("none", "bwrap"):  # interleaved, so load changes hit both alike
                times[mode].append(run_once(Path(tmp), mode, i))
    med = {m: statistics.median(v) * 1000 for m, v in times.items()}
    print(f"runs per mode: {ns.runs}  (cpus: {os.cpu_count()})")
    for m in ("none", "bwrap"):
        v = sorted(times[m])
        print(f"{m:6s} median {med[m]:7.1f} ms   min {v[0] * 1000:7.1f}   max {v[-1] * 1000:7.1f}")
    print(f"overhead of bwrap: {med['bwrap'] - med['none']:+.1f} ms per trial (median difference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
