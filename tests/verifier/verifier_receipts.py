"""Receipt dicts shaped exactly as the exec wrapper writes them (shared by the verifier tests)."""

from __future__ import annotations

import math
from typing import Any

from infrarsi.verifier.receipt import SCHEMA

N, WINDOW = 12, (4, 12)


def receipt_dict(n: int = N, step: float = 0.1, job_step: float | None = None, loss0: float = 3.0,
                 trial_id: str = "t", seed: int = 0) -> dict[str, Any]:
    """A clean completed run of ``n`` updates: decaying loss, moving grad norm, wrapper-stamped lines."""
    job_step = step if job_step is None else job_step
    ups = []
    for i in range(1, n + 1):
        # ``seed`` is run-to-run noise: ~1e-6 relative, inside every calibrated tolerance (numerics.FLOORS)
        ups.append({"index": i, "loss": loss0 * math.exp(-0.05 * i) * (1 + 1e-6 * ((i * 7 + seed) % 3)),
                    "grad_norm": (1.0 / i) * (1 + 1e-6 * seed), "tokens": 256, "samples": 16, "seq_len": 16,
                    "opt_step": i, "lr": 0.01 * min(1.0, i / 3), "batch_digest": f"d{i:04d}",
                    "step_time_s": job_step, "peak_mem_gib": 0.5, "phases": {}, "wall_t": 1.0 + step * i})
    return {
        "schema": SCHEMA, "trial_id": trial_id,
        "header": {"model_digest": "m" * 64, "params": 1234, "precision": "fp32", "world_size": 1,
                   "tokens_per_update": 256, "seq_len": 16, "versions": {}, "extra": {"global_batch": 16},
                   "wall_t": 1.0},
        "updates": ups,
        "footer": {"completed": n, "wall_t": 1.0 + step * n + 0.01},
        "wrapper": {"exit_code": 0, "signal": None, "timed_out": False, "wall_s": 2.0 + step * n,
                    "started_at": "2026-11-29T00:00:00+00:00", "oom": None, "errors": [], "bad_lines": 0,
                    "frozen_manifest": {"f.py": "aa"}, "frozen_before": {"f.py": "aa"}, "frozen_after": {"f.py": "aa"},
                    "memory_cap_gib": 1.0, "argv": ["python", "train.py"]},
        "signature": None,
    }
