"""A scripted coding agent for the tests: reads the prompt (a file path argument, else stdin), then acts on
``--mode``: ``good`` edits train.py (zero_grad set_to_none), ``frozen`` edits data.py, ``outside`` creates
notes.txt, ``fail`` exits 1 with a message on stderr, ``hang`` sleeps (with a child sleeping too), ``net`` must
reach STUB_NET_ADDR before the good edit, ``leak`` fails when a controller secret is in its environment,
``nothing`` changes nothing, ``binary`` writes bytes that are not UTF-8 into model.py, ``symlink`` replaces
model.py with a link."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    mode = args[args.index("--mode") + 1] if "--mode" in args else "good"
    files = [a for a in args if a.endswith(".md")]
    prompt = Path(files[0]).read_text() if files else sys.stdin.read()
    if "infrarsi proposal request" not in prompt:
        print("no prompt received", file=sys.stderr)
        return 3
    if mode in ("good", "leak"):
        if mode == "leak":
            bad = [k for k in os.environ if k in ("STUB_LLM_API_KEY", "INFRARSI_DATABASE_URL", "INFRARSI_HOME")]
            if bad:
                print(f"leaked: {','.join(bad)}", file=sys.stderr)
                return 4
            if os.environ.get("STUB_AGENT_KEY") != "agent-key":
                print("agent key not passed", file=sys.stderr)
                return 5
        p = Path("train.py")
        p.write_text(p.read_text().replace("optimizer.zero_grad(set_to_none=False)",
                                           "optimizer.zero_grad(set_to_none=True)"))
        Path("__pycache__").mkdir(exist_ok=True)
        Path("__pycache__/train.cpython-311.pyc").write_bytes(b"\x00\x01junk")
        print("Set zero_grad(set_to_none=True) to skip a memset per update.")
        return 0
    if mode == "net":  # reach the address in STUB_NET_ADDR (host:port), then make the good edit
        import socket

        host, port = os.environ["STUB_NET_ADDR"].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            print(f"no network: {exc}", file=sys.stderr)
            return 6
        p = Path("train.py")
        p.write_text(p.read_text().replace("optimizer.zero_grad(set_to_none=False)",
                                           "optimizer.zero_grad(set_to_none=True)"))
        return 0
    if mode == "frozen":
        p = Path("data.py")
        p.write_text(p.read_text() + "\n# faster data\n")
        return 0
    if mode == "outside":
        Path("notes.txt").write_text("I was here\n")
        return 0
    if mode == "fail":
        print("starting", file=sys.stderr)
        print("error: no API key configured for the agent", file=sys.stderr)
        return 1
    if mode == "hang":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # dies with the process group
        time.sleep(600)
        return 0
    if mode == "binary":
        Path("model.py").write_bytes(Path("model.py").read_bytes() + b"\n# \xff\xfe\n")
        return 0
    if mode == "symlink":
        os.remove("model.py")
        os.symlink("/etc/passwd", "model.py")
        return 0
    return 0  # nothing


if __name__ == "__main__":
    sys.exit(main())
