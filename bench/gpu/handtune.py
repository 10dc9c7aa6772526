"""Hand-tuned baseline for the nanogpt example: run fixed configurations of train.py and report MFU.

No infrarsi is involved: every configuration is a plain, fresh ``python train.py`` process
with its own empty ``TORCHINDUCTOR_CACHE_DIR`` (a warm cache changes compiled step times
by ~13%, see docs/measurements.md).  For each configuration it prints the median step time
over the window (updates 11-30 by default), tokens/s and MFU by the paper's formula
(``examples/nanogpt/flops.py``: 6 x matrix params + attention FLOPs per token, over the
989.5 TFLOP/s dense BF16 peak).  The best hand-tuned MFU is the target the promoted
configuration must reach 90% of.

Usage (on the GPU machine, from the project root)::

    python bench/gpu/handtune.py                       # every configuration, gpt-355m
    python bench/gpu/handtune.py --configs ref,compiled-mb16 --json out.json
    python bench/gpu/handtune.py --size tiny --updates 8 --window 3 8 --configs ref,eager-mb64   # CPU smoke test
    python bench/gpu/handtune.py --patches fused_qkv.diff,no_item_sync.diff   # knobs plus source patches

Exit status: 0 when every configuration ran, 1 when some failed (their rows say why).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nanogpt"
sys.path.insert(0, str(EXAMPLE))

from flops import PEAK_BF16_DENSE  # noqa: E402

_FAST = ["--dtype", "bf16", "--attention", "sdpa", "--optimizer-impl", "fused", "--tf32", "1"]

#: hand-picked configurations, in the order a person would try them
CONFIGS: dict[str, list[str]] = {
    "ref": ["--micro-batch", "4"],
    "bf16-sdpa-mb4": ["--micro-batch", "4", *_FAST],
    "eager-mb16": ["--micro-batch", "16", "--activation-checkpointing", "0", *_FAST],
    "eager-mb64": ["--micro-batch", "64", "--activation-checkpointing", "0", *_FAST],
    "compiled-mb8": ["--micro-batch", "8", "--activation-checkpointing", "0", "--compile", "1", *_FAST],
    "compiled-mb16": ["--micro-batch", "16", "--activation-checkpointing", "0", "--compile", "1", *_FAST],
    "compiled-mb32": ["--micro-batch", "32", "--activation-checkpointing", "0", "--compile", "1", *_FAST],
    "compiled-mb64": ["--micro-batch", "64", "--activation-checkpointing", "0", "--compile", "1", *_FAST],
    "compiled-mb64-ckpt": ["--micro-batch", "64", "--compile", "1", *_FAST],
}

_HEADER = re.compile(r"flops_per_token=(\d+)")
_UPDATE = re.compile(r"^update\s+(\d+) \| loss (\S+) \|.*\| step ([0-9.]+) ms")


def tokens_per_update(size: str) -> int:
    """Global batch x sequence length of ``size`` (from the example's model.SIZES)."""
    from model import SIZES

    s = SIZES[size]
    return int(s["global_batch"]) * int(s["seq_len"])


def parse_log(text: str) -> tuple[int | None, dict[int, float], dict[int, float]]:
    """``(flops_per_token, {update: step seconds}, {update: loss})`` from train.py's stdout."""
    m = _HEADER.search(text)
    steps: dict[int, float] = {}
    losses: dict[int, float] = {}
    for line in text.splitlines():
        u = _UPDATE.match(line.strip())
        if u:
            steps[int(u.group(1))] = float(u.group(3)) / 1000.0
            losses[int(u.group(1))] = float(u.group(2))
    return (int(m.group(1)) if m else None), steps, losses


def summarize(name: str, flags: list[str], text: str, rc: int, wall_s: float, size: str,
              window: tuple[int, int], n_gpus: int = 1) -> dict[str, Any]:
    """One result row: median window step time, tokens/s, MFU (or ``error``)."""
    fpt, steps, losses = parse_log(text)
    row: dict[str, Any] = {"name": name, "flags": flags, "rc": rc, "wall_s": round(wall_s, 1)}
    win = [steps[i] for i in range(window[0], window[1] + 1) if i in steps]
    if rc != 0 or fpt is None or len(win) < window[1] - window[0] + 1:
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        row["error"] = ("OOM: " if "OutOfMemoryError" in text or "out of memory" in text else "") + tail[0][:200]
        return row
    med = statistics.median(win)
    tpu = tokens_per_update(size)
    row.update({
        "median_step_s": med,
        "tokens_per_s": tpu / med,
        "mfu": fpt * tpu / (n_gpus * PEAK_BF16_DENSE * med),
        "flops_per_token": fpt,
        "window_mean_loss": statistics.fmean(losses[i] for i in range(window[0], window[1] + 1)),
    })
    return row


def _tree(patches: list[str], keep: Path) -> Path:
    """The example directory, or a patched copy of it under ``keep``."""
    if not patches:
        return EXAMPLE
    from infrarsi.controller.patches.intake import apply_patches

    dst = keep / "nanogpt"
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    apply_patches(dst, [(p, (EXAMPLE / "patches" / p).read_text()) for p in patches])
    return dst


def run_config(name: str, flags: list[str], args: argparse.Namespace, tree: Path, logdir: Path | None) -> dict[str, Any]:
    """Run one configuration in a fresh process with a fresh inductor cache; return its row."""
    cache = tempfile.mkdtemp(prefix=f"inductor-{name}-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "NANOGPT_THREADS": str(args.threads)}
    cmd = [sys.executable, "train.py", "--size", args.size, "--updates", str(args.updates), "--seed", str(args.seed),
           *flags]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=args.timeout)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        text, rc = out + f"\ntimeout after {args.timeout}s", 124
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.monotonic() - t0
    if logdir is not None:
        (logdir / f"{name}.log").write_text(text)
    return summarize(name, flags, text, rc, wall, args.size, tuple(args.window))


def format_row(row: dict[str, Any]) -> str:
    """One table line for ``row``."""
    if "error" in row:
        return f"{row['name']:<22} FAILED rc={row['rc']}: {row['error']}"
    return (f"{row['name']:<22} {row['median_step_s'] * 1000:10.1f} ms {row['tokens_per_s']:12.0f} tok/s "
            f"{row['mfu'] * 100:7.2f}% MFU  loss {row['window_mean_loss']:.4f}  ({row['wall_s']:.0f}s wall)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="gpt-355m")
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--window", type=int, nargs=2, default=[11, 30], metavar=("START", "END"))
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    p.add_argument("--patches", default="", help="comma-separated patch files from examples/nanogpt/patches")
    p.add_argument("--threads", type=int, default=4, help="NANOGPT_THREADS for each run")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    p.add_argument("--json", type=Path, help="write every row here")
    p.add_argument("--logdir", type=Path, help="keep each run's stdout/stderr here")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        p.error(f"--configs: unknown configuration {unknown[0]!r} (known: {', '.join(CONFIGS)})")
    if not 1 <= args.window[0] <= args.window[1] <= args.updates:
        p.error(f"--window {args.window} must lie within 1..--updates {args.updates}")
    if args.logdir is not None:
        args.logdir.mkdir(parents=True, exist_ok=True)
    patches = [x.strip() for x in args.patches.split(",") if x.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="handtune-") as keep:
        tree = _tree(patches, Path(keep))
        print(f"handtune: size={args.size} updates={args.updates} window={args.window} patches={patches or 'none'}",
              flush=True)
        for name in names:
            row = run_config(name, CONFIGS[name], args, tree, args.logdir)
            row["patches"] = patches
            rows.append(row)
            print(format_row(row), flush=True)
    ok = [r for r in rows if "error" not in r]
    if ok:
        best = max(ok, key=lambda r: r["mfu"])
        ref = next((r for r in ok if r["name"] == "ref"), None)
        speed = f", {ref['median_step_s'] / best['median_step_s']:.2f}x over ref" if ref else ""
        print(f"best: {best['name']} {best['mfu'] * 100:.2f}% MFU{speed}; 90% target {best['mfu'] * 90:.2f}% MFU",
              flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"size": args.size, "window": args.window, "rows": rows}, indent=2) + "\n")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
