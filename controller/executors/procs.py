"""Small /proc helpers for the local executor (Linux only).

A pid is identified together with its start time in clock ticks (field 22 of
``/proc/PID/stat``) so that a reused pid is never mistaken for our process;
zombies count as dead (PID 1 on some machines does not reap).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = raw[raw.rfind(")") + 2:].split()
    return rest  # rest[0] = state (field 3), rest[1] = ppid, rest[19] = starttime (field 22)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if gone."""
    f = _stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """True when ``pid`` exists, is not a zombie and (if given) started at ``ticks``."""
    f = _stat_fields(pid)
    if not f or f[0] in ("Z", "X"):
        return False
    return ticks is None or (len(f) > 19 and int(f[19]) == ticks)


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (by parent links), depth first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        f = _stat_fields(int(entry))
        if f and len(f) > 1:
            children.setdefault(int(f[1]), []).append(int(entry))
    out: list[int] = []
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def kill_tree(pid: int, ticks: int | None, grace_s: float = 5.0) -> None:
    """SIGTERM the process group of ``pid`` and every descendant's group, then
    SIGKILL whatever is still alive after ``grace_s`` seconds."""
    if not is_alive(pid, ticks):
        return
    victims = [pid, *descendants(pid)]
    groups = set()
    for p in victims:
        try:
            groups.add(os.getpgid(p))
        except OSError:
            pass
    _signal_all(groups, victims, signal.SIGTERM)
    # the root may ignore SIGTERM (the shim does, to record the exit): wait for
    # the descendants first, then for the root to exit on its own
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_alive(p) for p in victims[1:]):
        time.sleep(0.05)
    while time.monotonic() < deadline and is_alive(pid, ticks):
        time.sleep(0.05)
    if any(is_alive(p) for p in victims):
        _signal_all(groups, victims, signal.SIGKILL)


def _signal_all(groups: set[int], pids: list[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass
