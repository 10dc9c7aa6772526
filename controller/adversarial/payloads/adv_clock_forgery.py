"""Attack clock_forgery: the job reports every step 2x faster than it runs (its own clock lies)."""
print("ADV-RAN clock_forgery", flush=True)
from infrarsi.verifier.emit import Receipts

_orig_update = Receipts.update


def _update(self, *a, **kw):
    kw["step_time_s"] = kw["step_time_s"] / 2
    kw["phases"] = {k: v / 2 for k, v in (kw.get("phases") or {}).items()}
    _orig_update(self, *a, **kw)


Receipts.update = _update
