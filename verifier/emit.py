"""Receipt emitter: the only part of infrarsi a training job imports (standard library only).

A training job writes one JSON line per optimizer update, plus a header and a
footer, to a pipe the exec wrapper (``infrarsi exec``) holds open.  The wrapper
stamps each line with its own clock and signs the collection; the job never sees
the key and never writes the receipt file itself.

Destination, chosen by :meth:`Receipts.from_env`:

* ``INFRARSI_RECEIPT_FD``: an inherited file descriptor (a pipe set up by the wrapper),
  used when it is still that pipe (``INFRARSI_RECEIPT_INO``); otherwise
  ``INFRARSI_RECEIPT_FIFO``, a named pipe the wrapper also reads (launchers such as
  torchrun close inherited descriptors before starting workers);
* ``INFRARSI_RECEIPT_PATH``: a file the lines are appended to (debugging only, unsigned);
* neither: a silent no-op, so the script runs standalone unchanged.

Only rank 0 writes (``RANK`` environment variable; absent means rank 0).

Line format (one JSON object per line, UTF-8, non-finite floats written as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` so that every line is strict JSON):

* ``{"kind": "header", "model_digest", "params", "precision", "world_size",
  "tokens_per_update", "seq_len", "versions", "extra"}``
* ``{"kind": "update", "index", "loss", "grad_norm", "tokens", "samples", "seq_len",
  "opt_step", "lr", "batch_digest", "step_time_s", "peak_mem_gib", "phases"}``
* ``{"kind": "footer", "completed", "extra"?}`` (``extra``: ``eval``, ``param_norms``, ``resume_loss``, ...)
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from typing import IO, Any

#: environment variable naming the inherited descriptor the wrapper reads
FD_ENV = "INFRARSI_RECEIPT_FD"
#: inode of the wrapper's pipe, so a descriptor number reused after a launcher closed it is not written to
INO_ENV = "INFRARSI_RECEIPT_INO"
#: a FIFO the wrapper also reads, for launchers (torchrun) that close inherited descriptors
FIFO_ENV = "INFRARSI_RECEIPT_FIFO"
#: environment variable naming a plain file to append to (debugging, never signed)
PATH_ENV = "INFRARSI_RECEIPT_PATH"


def _clean(value: Any) -> Any:
    """Return ``value`` with non-finite floats replaced by their JSON-safe string names."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _to_float(value: Any) -> float:
    """Convert a number-like value (python/numpy/0-d torch tensor) to ``float``."""
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


class Receipts:
    """Writes receipt lines for one training process.

    Construct with :meth:`from_env` (the normal path) or directly with an open
    text stream (tests).  A ``Receipts`` whose stream is ``None`` accepts every
    call and writes nothing.  Write errors (the wrapper went away) are swallowed
    after the first one so that receipts never crash the training job.
    """

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream
        self._broken = False

    @classmethod
    def from_env(cls) -> "Receipts":
        """Open the destination named by the environment (see module docstring).

        Returns a no-op instance on ranks other than 0, when neither variable is
        set, or when the descriptor cannot be opened.
        """
        rank = os.environ.get("RANK", "0").strip() or "0"
        if rank != "0":
            return cls(None)
        fd_text = os.environ.get(FD_ENV)
        if fd_text:
            try:
                fd = int(fd_text)
                ino = os.environ.get(INO_ENV)
                if ino is None or str(os.fstat(fd).st_ino) == ino:
                    return cls(os.fdopen(fd, "w", buffering=1, encoding="utf-8", closefd=False))
            except (OSError, ValueError):
                pass
            fifo = os.environ.get(FIFO_ENV)
            if fifo:
                try:
                    return cls(open(fifo, "w", buffering=1, encoding="utf-8"))
                except OSError:
                    pass
            return cls(None)
        path = os.environ.get(PATH_ENV)
        if path:
            return cls(open(path, "a", buffering=1, encoding="utf-8"))
        return cls(None)

    @property
    def active(self) -> bool:
        """True when lines are actually written somewhere."""
        return self._stream is not None and not self._broken

    def _write(self, obj: dict[str, Any]) -> None:
        if self._stream is None or self._broken:
            return
        line = json.dumps(_clean(obj), separators=(",", ":"), allow_nan=False)
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            self._broken = True

    def header(
        self,
        model_digest: str,
        params: int,
        precision: str,
        world_size: int,
        tokens_per_update: int,
        seq_len: int,
        versions: dict | None = None,
        extra: dict | None = None,
    ) -> None:
        """Write the header: what model, precision, parallelism and workload the job runs.

        ``versions`` defaults to the Python version and platform; ``extra`` holds any
        further static facts (e.g. ``{"global_batch": 64}``) that the verifier
        compares with the reference's as declared static invariants.
        """
        if versions is None:
            versions = {"python": platform.python_version(), "platform": sys.platform}
        self._write(
            {
                "kind": "header",
                "model_digest": str(model_digest),
                "params": int(params),
                "precision": str(precision),
                "world_size": int(world_size),
                "tokens_per_update": int(tokens_per_update),
                "seq_len": int(seq_len),
                "versions": dict(versions),
                "extra": dict(extra or {}),
            }
        )

    def update(
        self,
        index: int,
        loss: float,
        grad_norm: float,
        tokens: int,
        samples: int,
        seq_len: int,
        opt_step: int,
        lr: float,
        batch_digest: str,
        step_time_s: float,
        peak_mem_gib: float | None = None,
        phases: dict[str, float] | None = None,
    ) -> None:
        """Write one line for optimizer update ``index`` (1-based, as counted by the job).

        ``step_time_s`` is the job's own measurement of this update; ``phases``
        optionally splits it into ``forward``/``backward``/``optimizer``/``data`` seconds.
        Tensors with ``.item()`` are accepted for the float fields.
        """
        self._write(
            {
                "kind": "update",
                "index": int(index),
                "loss": _to_float(loss),
                "grad_norm": _to_float(grad_norm),
                "tokens": int(tokens),
                "samples": int(samples),
                "seq_len": int(seq_len),
                "opt_step": int(opt_step),
                "lr": _to_float(lr),
                "batch_digest": str(batch_digest),
                "step_time_s": _to_float(step_time_s),
                "peak_mem_gib": None if peak_mem_gib is None else _to_float(peak_mem_gib),
                "phases": {str(k): _to_float(v) for k, v in (phases or {}).items()},
            }
        )

    def footer(self, completed: int, extra: dict | None = None, *, eval_loss: float | None = None,
               param_norms: dict[str, float] | None = None) -> None:
        """Write the footer with the number of updates the job completed.

        ``extra`` optionally carries end-of-run results that L4/L5 compare with the
        reference's: ``{"eval": <float>}`` (``eval_matches``: the loss on a fixed held-out
        batch after the last update), ``{"param_norms": {name: float}}`` (``params_match``:
        per-tensor L2 norms of the final parameters) and ``{"resume_loss": <float>}``
        (``resume_continues``).  ``eval_loss`` / ``param_norms`` are shorthands that set
        those two keys (they win over the same keys in ``extra``).
        """
        ex: dict[str, Any] = dict(extra or {})
        if eval_loss is not None:
            ex["eval"] = _to_float(eval_loss)
        if param_norms is not None:
            ex["param_norms"] = {str(k): _to_float(v) for k, v in param_norms.items()}
        line: dict[str, Any] = {"kind": "footer", "completed": int(completed)}
        if ex:
            line["extra"] = ex
        self._write(line)

    def close(self) -> None:
        """Flush and release the destination (the inherited descriptor itself stays open)."""
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError:
                pass
            self._stream = None
