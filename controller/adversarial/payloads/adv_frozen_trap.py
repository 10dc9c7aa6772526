"""Attack frozen_trap: swap a frozen file for a link to /dev/zero, so the trusted wrapper, which hashes the frozen
files after the run, reads forever (or, with a link to a secret, reads the secret for the job)."""
print("ADV-RAN frozen_trap", flush=True)
import os

try:
    os.unlink("infrarsi.yaml")
    os.symlink("/dev/zero", "infrarsi.yaml")
    print("ADV-SWAPPED infrarsi.yaml -> /dev/zero", flush=True)
except OSError as _exc:
    print(f"ADV-SWAP-FAILED {_exc}", flush=True)
