"""The adversarial matrix's target: a tiny honest training job (pure Python, ~10 updates, real receipts).

Each update does a little real compute (a 24-weight linear model fitted by SGD on a fixed synthetic set) plus a
simulated 40 ms of device time, and times itself loop to loop like the adapters do.  ``conf.json`` (when present)
may set ``lr_scale``; nothing else is read from the tree.
"""
import hashlib
import json
import os
import random
import sys
import time

from infrarsi.verifier.emit import Receipts

UPDATES = 10
DIM = 24


def lr_scale() -> float:
    try:
        with open("conf.json") as fh:
            return float(json.load(fh).get("lr_scale", 1.0))
    except (OSError, ValueError):
        return 1.0


def main() -> None:
    rng = random.Random(1234)
    data = [([rng.uniform(-1, 1) for _ in range(DIM)], rng.uniform(-1, 1)) for _ in range(64)]
    w = [0.0] * DIM
    lr = 0.05 * lr_scale()
    rx = Receipts.from_env()
    rx.header(model_digest="adv-linear-24", params=DIM, precision="fp32", world_size=1, tokens_per_update=64,
              seq_len=1, versions={"python": sys.version.split()[0]}, extra={})
    t_prev = time.perf_counter()
    for i in range(1, UPDATES + 1):
        time.sleep(0.04)
        grad = [0.0] * DIM
        loss = 0.0
        for _ in range(8):  # a little real CPU work per update
            grad = [0.0] * DIM
            loss = 0.0
            for x, y in data:
                err = sum(a * b for a, b in zip(w, x)) - y
                loss += err * err / len(data)
                for k in range(DIM):
                    grad[k] += 2 * err * x[k] / len(data)
        w = [a - lr * g for a, g in zip(w, grad)]
        gnorm = sum(g * g for g in grad) ** 0.5
        now = time.perf_counter()
        dt, t_prev = now - t_prev, now
        digest = hashlib.sha1(f"batch-{i}".encode()).hexdigest()[:16]
        rx.update(index=i, loss=loss, grad_norm=gnorm, tokens=64, samples=64, seq_len=1, opt_step=i, lr=lr,
                  batch_digest=digest, step_time_s=dt, peak_mem_gib=None,
                  phases={"forward": dt * 0.4, "backward": dt * 0.5, "optimizer": dt * 0.1, "data": 0.0})
    rx.footer(completed=UPDATES)
    print(f"done pid={os.getpid()}")


if __name__ == "__main__":
    main()
