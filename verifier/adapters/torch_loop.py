"""Adapter for a plain PyTorch training loop (torch is imported lazily).

Helpers: :func:`model_digest`, :func:`param_count`, :func:`batch_digest`,
:func:`peak_mem_gib`, :func:`software_versions`, :func:`param_norms` (the final-parameter
checksum of the footer), and :class:`ReceiptLogger`, which
lets a plain loop emit receipts with a handful of added lines::

    from infrarsi.verifier.adapters.torch_loop import ReceiptLogger
    rl = ReceiptLogger(model, optimizer, seq_len=S, precision="fp32")
    for x, y in batches:
        rl.begin(x)                      # starts the clock, digests the update's input batch
        loss = loss_fn(model(x), y); loss.backward()
        rl.grads()                       # gradient norm, before clipping / the optimizer step
        optimizer.step(); optimizer.zero_grad()
        rl.end(loss)                     # stops the clock, writes the line
    rl.finish(eval_loss=held_out_loss(model))   # footer: eval loss + per-tensor parameter norms
"""

from __future__ import annotations

import hashlib
import platform
import time
from typing import Any

from infrarsi.verifier.emit import Receipts


def model_digest(model: Any, sample: int = 8) -> str:
    """SHA-256 (hex) over parameter names, shapes, dtypes-free sample of initial values.

    Call it before the first update.  ``sample`` values are taken from the start
    and end of each flattened parameter, rounded to 6 significant digits so that
    equal initialisations on different devices give equal digests.
    """
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        flat = p.detach().reshape(-1).float().cpu()
        vals = flat[:sample].tolist() + flat[-sample:].tolist() if flat.numel() else []
        h.update(f"{name}|{tuple(p.shape)}|{p.requires_grad}|".encode())
        h.update(",".join(f"{v:.6g}" for v in vals).encode())
        h.update(b";")
    return h.hexdigest()


def param_count(model: Any) -> int:
    """Number of trainable parameters (``requires_grad``)."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def batch_digest(tensor: Any) -> str:
    """Cheap, order-sensitive digest of an update's input batch (16 hex chars).

    Hashes shape, element sum, and the first and last 4 elements; it costs one
    reduction, so it is safe to call every update.
    """
    t = tensor.detach()
    flat = t.reshape(-1)
    n = flat.numel()
    head = flat[:4].double().cpu().tolist()
    tail = flat[-4:].double().cpu().tolist() if n else []
    total = float(flat.double().sum().item()) if n else 0.0
    text = f"{tuple(t.shape)}|{total:.9g}|{head}|{tail}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def peak_mem_gib() -> float | None:
    """Peak reserved CUDA memory in GiB since start, or ``None`` without a CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.max_memory_reserved()) / 2**30


def software_versions() -> dict[str, str]:
    """Versions of Python, torch, CUDA and NCCL (where present)."""
    import torch

    out = {"python": platform.python_version(), "torch": str(torch.__version__)}
    if torch.version.cuda:
        out["cuda"] = str(torch.version.cuda)
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - NCCL may be absent in CPU builds
            pass
    return out


def param_norms(model: Any, digits: int = 10) -> dict[str, float]:
    """Per-tensor L2 norms of the parameters, ``{name: norm}`` in ``named_parameters`` order.

    The footer's final-parameter checksum (``extra.param_norms``): computed in float32
    (float64 accumulation would not change the comparison), rounded to ``digits``
    significant digits so the receipt stays small.  Tied parameters appear once.
    """
    import torch

    out: dict[str, float] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            out[name] = float(f"{float(p.detach().float().norm(2).item()):.{digits}g}")
    return out


def grad_norm(model: Any) -> float:
    """Global L2 norm of the current gradients (0.0 when there are none)."""
    import torch

    norms = [p.grad.detach().float().norm(2) for p in model.parameters() if p.grad is not None]
    if not norms:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack(norms), 2).item())


def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class ReceiptLogger:
    """Emits a header once, one update line per :meth:`begin`/:meth:`end` pair, and a footer.

    Step time is measured loop to loop: from the previous :meth:`end` (the first
    update: from :meth:`begin`) to this :meth:`end`, so data loading and logging
    between updates count, as they do on the wrapper's clock.

    ``optimizer`` (optional) gets a step post-hook that counts real ``step()`` calls;
    that count is reported as ``opt_step`` and its first param group's ``lr`` as ``lr``.
    ``tokens_per_update`` defaults to the first batch's ``numel()``.  The header is
    written lazily on the first :meth:`begin` so that ``model_digest`` sees the
    initial weights.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        *,
        seq_len: int | None = None,
        precision: str = "fp32",
        tokens_per_update: int | None = None,
        world_size: int = 1,
        extra: dict | None = None,
        receipts: Receipts | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.seq_len = seq_len
        self.precision = precision
        self.tokens_per_update = tokens_per_update
        self.world_size = world_size
        self.extra = extra
        self.rx = receipts if receipts is not None else Receipts.from_env()
        self.opt_steps = 0
        self.index = 0
        self._header_done = False
        self._t0 = 0.0
        self._digest = ""
        self._tokens = 0
        self._samples = 0
        self._seq = 0
        self._gn: float | None = None
        self._lr: float | None = None
        self._last_end: float | None = None
        self.phases: dict[str, float] = {}
        if optimizer is not None and hasattr(optimizer, "register_step_post_hook"):
            optimizer.register_step_post_hook(self._count_step)

    def _count_step(self, *_: Any) -> None:
        self.opt_steps += 1

    def _header(self, batch: Any) -> None:
        seq = self.seq_len if self.seq_len is not None else int(batch.shape[-1]) if batch.dim() > 1 else 1
        tpu = self.tokens_per_update if self.tokens_per_update is not None else int(batch.numel())
        self.rx.header(
            model_digest(self.model),
            param_count(self.model),
            self.precision,
            self.world_size,
            tpu,
            seq,
            versions=software_versions(),
            extra=self.extra,
        )
        self._header_done = True

    def begin(self, batch: Any, tokens: int | None = None, samples: int | None = None) -> None:
        """Start update timing; ``batch`` is the whole update's input (all micro-batches)."""
        if not self._header_done:
            self._header(batch)
        self._digest = batch_digest(batch)
        self._samples = int(samples if samples is not None else batch.shape[0])
        self._seq = self.seq_len if self.seq_len is not None else int(batch.shape[-1])
        self._tokens = int(tokens if tokens is not None else batch.numel())
        self._gn = None
        self._lr = float(self.optimizer.param_groups[0]["lr"]) if self.optimizer is not None else None
        self.phases = {}
        _sync()
        now = time.perf_counter()
        self._t0 = now if self._last_end is None else self._last_end

    def grads(self) -> float:
        """Measure and remember the gradient norm now (call after backward, before the step)."""
        self._gn = grad_norm(self.model)
        return self._gn

    def _reduce(self, loss: float, gn: float, tokens: int, samples: int) -> tuple[float, float, int, int]:
        """Hook for the DDP adapter: combine per-rank values (identity here)."""
        return loss, gn, tokens, samples

    def end(self, loss: Any, grad_norm: float | None = None, lr: float | None = None,
            step_time_s: float | None = None) -> None:
        """Stop timing and write the update line.

        ``grad_norm`` overrides the value from :meth:`grads`; ``lr`` overrides the
        learning rate read at :meth:`begin` (the one this update used);
        ``step_time_s`` overrides the logger's own begin-to-end timing.
        """
        _sync()
        self.index += 1
        gn = grad_norm if grad_norm is not None else self._gn if self._gn is not None else 0.0
        loss_f = float(loss.detach().float().item()) if hasattr(loss, "detach") else float(loss)
        loss_f, gn, tokens, samples = self._reduce(loss_f, float(gn), self._tokens, self._samples)
        # stop the clock after the cross-rank reduction, right before the line is written: the job's update
        # boundary then coincides with the wrapper's stamp, whatever the ranks' skew (L5 timing_consistent)
        now = time.perf_counter()
        dt = now - self._t0 if step_time_s is None else float(step_time_s)
        self._last_end = now
        if lr is None:
            lr = self._lr
        self.rx.update(
            self.index, loss_f, gn, tokens, samples, self._seq,
            self.opt_steps if self.optimizer is not None else self.index,
            float(lr or 0.0), self._digest, dt, peak_mem_gib(), self.phases or None,
        )

    def finish(self, eval_loss: Any = None, extra: dict | None = None, norms: bool = True) -> None:
        """Write the footer: the number of updates logged, and the end-of-run numerics.

        ``eval_loss`` (a float or a 0-d tensor) is the loss on a fixed held-out batch after
        the last update (footer ``extra.eval``, compared by L4 ``eval_matches``);
        ``norms`` adds ``extra.param_norms`` = :func:`param_norms` of the final model (L4
        ``params_match``).  ``extra`` is merged last (e.g. ``{"resume_loss": x}``).
        """
        out: dict[str, Any] = {}
        if eval_loss is not None:
            out["eval"] = float(eval_loss.detach().float().item()) if hasattr(eval_loss, "detach") else float(eval_loss)
        if norms and getattr(self.rx, "active", True):
            out["param_norms"] = param_norms(self.model)
        out.update(extra or {})
        self.rx.footer(self.index, extra=out or None)
