"""Stand-in for ``python -m infrarsi.verifier.exec`` used by the executor tests (stdlib only).

Same command line and the same receipt.json shape (unsigned fields only), so the
executors are tested against the wrapper's contract, not its implementation:
``standin_wrapper.py --trial-id ID --out DIR [--key-file K] [--timeout S]
[--frozen-manifest M] [--memory-cap-gib X] -- CMD ...``.
Env ``STANDIN_NO_RECEIPT=1`` makes it skip the receipt (a job whose receipt never appears).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--trial-id", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--key-file")
    p.add_argument("--timeout", type=float)
    p.add_argument("--frozen-manifest")
    p.add_argument("--memory-cap-gib", type=float)
    a, _unknown = p.parse_known_args(argv[:split])  # sandbox options (--src, --pass-env, ...) are not modelled
    cmd = argv[split + 1:]
    os.makedirs(a.out, exist_ok=True)
    if a.key_file and os.path.exists(a.key_file):
        open(a.key_file, "rb").read()
        os.unlink(a.key_file)
    started = time.time()
    timed_out = False
    with open(os.path.join(a.out, "job.log"), "wb") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def forward(signum, frame):  # noqa: ARG001
            try:
                os.killpg(child.pid, signum)
            except OSError:
                pass

        signal.signal(signal.SIGTERM, forward)
        try:
            rc = child.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(child.pid, signal.SIGKILL)
            rc = child.wait()
    text = open(os.path.join(a.out, "job.log"), encoding="utf-8", errors="replace").read()
    errors = []
    oom = None
    for line in text.splitlines():
        if re.search(r"CUDA out of memory|OutOfMemoryError", line):
            errors.append({"kind": "oom", "line": line})
            m = re.search(r"Tried to allocate ([\d.]+) GiB.*?([\d.]+) GiB is free", line)
            oom = {"requested_gib": float(m.group(1)), "free_gib": float(m.group(2))} if m else {"requested_gib": None, "free_gib": None}
        elif line.startswith("Traceback"):
            errors.append({"kind": "traceback", "line": line})
    receipt = {
        "schema": "infrarsi.receipt/1", "trial_id": a.trial_id, "header": None, "updates": [], "footer": None,
        "wrapper": {"exit_code": rc if rc >= 0 else None, "signal": -rc if rc < 0 else None, "timed_out": timed_out,
                    "wall_s": time.time() - started, "oom": oom, "errors": errors, "argv": cmd,
                    "memory_cap_gib": a.memory_cap_gib},
        "signature": "standin-unsigned",
    }
    if os.environ.get("STANDIN_NO_RECEIPT") != "1":
        with open(os.path.join(a.out, "receipt.json"), "w") as fh:
            json.dump(receipt, fh)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
