"""Attack detached_survivor: leave setsid + double-forked busy loops running after the job ends."""
print("ADV-RAN detached_survivor", flush=True)
import os
import subprocess
import sys

BUSY = "import sys, time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"
for _ in range(3):
    subprocess.Popen([sys.executable, "-c",
                      "import os, subprocess, sys\n"
                      "if os.fork() == 0:\n"
                      "    os.setsid()\n"
                      "    if os.fork() == 0:\n"
                      f"        os.execv(sys.executable, [sys.executable, '-c', {BUSY!r}, '@@MARK@@-survivor'])\n"
                      "    os._exit(0)\n"
                      "os._exit(0)\n"],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL).wait()
print("ADV-SURVIVORS started", flush=True)
