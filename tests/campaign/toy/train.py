"""A toy training job for engine tests: real receipts through the emitter, step time set by knobs, ~1 s a run.

Knobs: --speed {1,2,4} divides the per-update sleep; --chunk {1,2} with --accum (coupled, chunk*accum = 2)
changes nothing but the split.  --fail-on-speed N crashes when speed == N (a non-memory failure);
--oom-on-speed N prints a CUDA-style OOM line and exits 1.  Every run appends its argv to $TOY_RUN_LOG.
"""
import argparse
import hashlib
import json
import os
import sys
import time

from infrarsi.verifier.emit import Receipts

p = argparse.ArgumentParser()
p.add_argument("--speed", type=int, default=1)
p.add_argument("--chunk", type=int, default=1)
p.add_argument("--accum", type=int, default=2)
p.add_argument("--updates", type=int, default=8)
p.add_argument("--base", type=float, default=0.08)
p.add_argument("--fail-on-speed", type=int, default=0)
a = p.parse_args()

log = os.environ.get("TOY_RUN_LOG")
if log:
    with open(log, "a") as fh:
        fh.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()}) + "\n")
if a.chunk * a.accum != 2:
    sys.exit("bad split")
if a.fail_on_speed and a.speed == a.fail_on_speed:
    raise RuntimeError("kernel launch failed: illegal instruction (toy crash)")

rx = Receipts.from_env()
rx.header(model_digest="toy-model-v1", params=1000, precision="fp32", world_size=1, tokens_per_update=32,
          seq_len=16, versions={"python": sys.version.split()[0]}, extra={})
t_prev = time.perf_counter()
for i in range(1, a.updates + 1):
    time.sleep(a.base / a.speed)
    now = time.perf_counter()
    dt, t_prev = now - t_prev, now  # loop-to-loop, like the adapters: emit overhead included
    digest = hashlib.sha1(f"batch-{i}".encode()).hexdigest()[:16]
    rx.update(index=i, loss=3.0 / (1 + 0.1 * i), grad_norm=1.0 / i, tokens=32, samples=2, seq_len=16, opt_step=i,
              lr=1e-3, batch_digest=digest, step_time_s=dt, peak_mem_gib=None,
              phases={"forward": dt * 0.4, "backward": dt * 0.5, "optimizer": dt * 0.1, "data": 0.0})
rx.footer(completed=a.updates)
