"""Crash points for crash-safety tests: ``INFRARSI_CRASH_AT=point[:n]`` SIGKILLs this process the n-th time
(default 1st) execution reaches ``crash_point(point)``.  Unset (always, in production) it costs one dict lookup.

Points: ``after_intent`` (intent stored, executor not called), ``after_submit`` (job launched, job id not yet
stored), ``in_ingest`` (inside the ingest transaction, before commit).
"""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def crash_point(point: str) -> None:
    """SIGKILL the current process if ``INFRARSI_CRASH_AT`` names ``point`` and its count is reached."""
    spec = os.environ.get("INFRARSI_CRASH_AT")
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != point:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
