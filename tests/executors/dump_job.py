"""Test job: ``dump_job.py OUTFILE ARGS...`` writes {"argv": ARGS, "env": {INFRARSI_*/KNOB_* vars},
"cwd", "cuda_visible_devices"} as JSON to OUTFILE (stdlib only)."""

import json
import os
import sys

out = sys.argv[1]
data = {
    "argv": sys.argv[2:],
    "env": {k: v for k, v in os.environ.items() if k.startswith(("KNOB_", "INFRARSI_TRIAL"))},
    "cwd": os.getcwd(),
    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
}
with open(out, "w", encoding="utf-8") as fh:
    json.dump(data, fh)
print("dumped", out)
