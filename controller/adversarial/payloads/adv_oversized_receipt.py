"""Attack oversized_receipt: 300k update lines on the receipt pipe and a 50 MB stdout flood."""
print("ADV-RAN oversized_receipt", flush=True)
import json
import sys

from infrarsi.verifier.emit import Receipts

LINES = 300_000
_orig_header = Receipts.header


def _header(self, *a, **kw):
    _orig_header(self, *a, **kw)
    if self._stream is None:
        return
    row = {"kind": "update", "loss": 1.0, "grad_norm": 1.0, "tokens": 64, "samples": 64, "seq_len": 1, "opt_step": 1,
           "lr": 0.05, "batch_digest": "0" * 16, "step_time_s": 1e-4, "peak_mem_gib": None, "phases": {}}
    chunk = []
    for i in range(1, LINES + 1):
        row["index"] = i
        chunk.append(json.dumps(row, separators=(",", ":")))
        if len(chunk) == 5000:
            try:
                self._stream.write("\n".join(chunk) + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                return
            chunk = []
    line = b"y" * 1023 + b"\n"
    for _ in range(50 * 1024):
        sys.stdout.buffer.write(line)
    sys.stdout.flush()


Receipts.header = _header
