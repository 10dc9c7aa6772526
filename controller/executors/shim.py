"""Launcher shim for local trials (stdlib only; run as a script, not imported).

Usage: ``python shim.py OUTDIR -- CMD ...``.  Runs CMD as a child in the shim's
own process group, waits for it and writes ``OUTDIR/local-exit.json``
(``{"returncode", "exit_code", "signal", "end_time"}``) atomically, then exits
with the child's status (128+signal when signalled).  The file lets an executor
in *another* process (after a daemon restart) learn how the trial ended.
SIGTERM/SIGINT reach the child through the process group; the shim ignores
them itself so that it survives to record the outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: shim.py OUTDIR -- CMD ...", file=sys.stderr)
        return 2
    outdir, cmd = argv[0], argv[2:]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # the child gets default dispositions back
        child = subprocess.Popen(cmd, restore_signals=True,
                                 preexec_fn=lambda: (signal.signal(signal.SIGTERM, signal.SIG_DFL),
                                                     signal.signal(signal.SIGINT, signal.SIG_DFL)))
        rc = child.wait()
    except OSError as exc:
        print(f"infrarsi shim: cannot start {cmd[0]!r}: {exc}", file=sys.stderr)
        rc = 127
    record = {
        "returncode": rc,
        "exit_code": rc if rc >= 0 else None,
        "signal": -rc if rc < 0 else None,
        "end_time": time.time(),
    }
    tmp = os.path.join(outdir, f".local-exit.json.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(outdir, "local-exit.json"))
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
