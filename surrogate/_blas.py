"""Run the surrogates' small dense linear algebra on one BLAS thread (internal).

The matrices here are at most a few hundred columns wide.  On the 2-vCPU
machines this project runs on, multi-threaded OpenBLAS makes such calls
10-100x *slower* (threads spin-waiting on each other: a 1,000 x 200 refit
measured ~570 ms threaded against ~4 ms on one thread).  :func:`one_thread`
is a context manager that pins every OpenBLAS library loaded in the process
(numpy's and scipy's bundled copies) to one thread for the calling thread
and restores the previous setting on exit.

It finds the libraries through /proc/self/maps and calls their exported
``*openblas_set_num_threads_local`` (thread-local, returns the previous
value) where available.  Anywhere this is unavailable (not Linux, another
BLAS), it is a no-op and only speed is affected, never results.  Setting
``INFRARSI_BLAS_THREADS_UNTOUCHED=1`` in the environment disables it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_setters: list[Callable[[int], int]] | None = None


def _find_setters() -> list[Callable[[int], int]]:
    found: list[Callable[[int], int]] = []
    if os.environ.get("INFRARSI_BLAS_THREADS_UNTOUCHED") == "1":
        return found
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            paths = {
                line.split()[-1]
                for line in fh
                if "openblas" in line.lower() and line.split()[-1].startswith("/")
            }
    except OSError:
        return found
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError:
            continue
        fn = getattr(lib, "openblas_set_num_threads_local", None)
        if fn is None:
            continue
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
        found.append(fn)
    return found


def _get_setters() -> list[Callable[[int], int]]:
    global _setters
    if _setters is None:
        with _lock:
            if _setters is None:
                _setters = _find_setters()
    return _setters


@contextmanager
def one_thread() -> Iterator[None]:
    """Pin OpenBLAS to one thread for the calling thread inside the block."""
    setters = _get_setters()
    previous = [fn(1) for fn in setters]
    try:
        yield
    finally:
        for fn, prev in zip(setters, previous):
            if prev > 0:
                fn(prev)


def single_threaded(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run ``fn`` inside :func:`one_thread`."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> T:
        with one_thread():
            return fn(*args, **kwargs)

    return wrapper
