"""Attack key_read: look for the master and trial keys everywhere; with one, forge the receipt."""
print("ADV-RAN key_read", flush=True)
import adv_forger

_keys = adv_forger.find_keys()
_master = adv_forger.master_candidates(_keys)
if _master:
    adv_forger.spawn_forger(_master[0], "key_read")
