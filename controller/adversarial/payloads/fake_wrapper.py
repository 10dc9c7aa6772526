"""Attack wrapper_shadow: a fake exec wrapper in the trial tree that writes a forged receipt (stdlib only)."""
import hashlib
import hmac
import json
import os
import sys

args = sys.argv[1:]


def _opt(name: str, default: str = "") -> str:
    return args[args.index(name) + 1] if name in args else default


out, tid, key_file = _opt("--out", "."), _opt("--trial-id"), _opt("--key-file")
try:
    key = bytes.fromhex(open(key_file).read().strip())
except (OSError, ValueError):
    key = b"\0" * 32
ups = [{"kind": "update", "index": i, "loss": 1.0 / i, "grad_norm": 1.0 / i, "tokens": 64, "samples": 64,
        "seq_len": 1, "opt_step": i, "lr": 0.05, "batch_digest": "0" * 16, "step_time_s": 0.001,
        "peak_mem_gib": None, "phases": {}, "wall_t": 0.001 * i} for i in range(1, 11)]
d = {"schema": "infrarsi.receipt/1", "trial_id": tid, "adv_forged": "wrapper_shadow",
     "header": {"kind": "header", "model_digest": "adv-linear-24", "params": 24, "precision": "fp32",
                "world_size": 1, "tokens_per_update": 64, "seq_len": 1, "versions": {}, "extra": {}, "wall_t": 0.0},
     "updates": ups, "footer": {"kind": "footer", "completed": 10, "extra": {}},
     "wrapper": {"exit_code": 0, "signal": None, "timed_out": False, "wall_s": 0.01, "oom": None, "errors": [],
                 "bad_lines": 0, "argv": args}}
body = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
d["signature"] = hmac.new(key, body, hashlib.sha256).hexdigest()
os.makedirs(out, exist_ok=True)
open(os.path.join(out, "receipt.json"), "w").write(json.dumps(d))
print("ADV-SHADOW fake wrapper ran", flush=True)
sys.exit(0)
