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

With gradient accumulation, ``rl.begin(xm, loss=loss)`` may be called once per micro-batch (before a prefetch
overwrites it) and ``rl.end()`` then reports the mean of those losses; :class:`BatchDigest` makes the update's
digest equal to that of the whole batch.  docs/adapters.md has the nanoGPT-style and DDP loops.
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
    reduction, so it is safe to call every update.  :class:`BatchDigest` computes the
    same digest from the update's micro-batches (their concatenation along dim 0).
    """
    d = BatchDigest()
    d.add(tensor)
    return d.hexdigest()


class BatchDigest:
    """:func:`batch_digest` of ``torch.cat(parts, 0)``, built one part (micro-batch, rank shard) at a time.

    :meth:`add` only queues device work (a sum and two 4-element slices; no host synchronisation), so a loop
    that prefetches the next micro-batch keeps overlapping; :meth:`local` synchronises once.  Parts of one
    update must share their trailing dimensions (as ``torch.cat`` requires); otherwise the shape hashed is the
    total element count.  Integer token ids give exactly the digest of the concatenated batch; float inputs
    give it up to the last bit of the double-precision sum (printed to 9 digits).
    """

    def __init__(self) -> None:
        self.rows = 0
        self.numel = 0
        self.parts = 0
        self.shape: tuple[int, ...] = ()
        self.rest: tuple[int, ...] | None = None
        self.ragged = False
        self._sums: list[Any] = []
        self._heads: list[Any] = []
        self._nhead = 0
        self._tails: list[Any] = []

    def add(self, tensor: Any) -> None:
        """Append one part (any shape; dim 0 is the sample dimension)."""
        t = tensor.detach()
        flat = t.reshape(-1)
        n = int(flat.numel())
        rest = tuple(int(d) for d in t.shape[1:]) if t.dim() else ()
        self.parts += 1
        if self.rest is None:
            self.rest, self.shape = rest, tuple(int(d) for d in t.shape)
        elif rest != self.rest:
            self.ragged = True
        self.rows += int(t.shape[0]) if t.dim() else 1
        self.numel += n
        if n == 0:
            return
        self._sums.append(flat.double().sum())
        if self._nhead < 4:
            take = flat[: 4 - self._nhead].double()
            self._heads.append(take)
            self._nhead += int(take.numel())
        self._tails.append(flat[-4:].double())
        while len(self._tails) > 1 and sum(int(x.numel()) for x in self._tails[1:]) >= 4:
            self._tails.pop(0)

    def local(self) -> dict[str, Any]:
        """The parts' facts as plain numbers: ``rows``, ``numel``, ``rest``, ``ragged``, ``total``, ``head``,
        ``tail`` (one host synchronisation)."""
        total = 0.0
        for x in self._sums:
            total += float(x.item())
        head = [v for x in self._heads for v in x.cpu().tolist()][:4]
        tail = [v for x in self._tails for v in x.cpu().tolist()][-4:]
        return {"rows": self.rows, "numel": self.numel, "rest": tuple(self.rest or ()), "ragged": self.ragged,
                "total": total, "head": head, "tail": tail, "shape": self.shape if self.parts == 1 else None}

    @staticmethod
    def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """The facts of several :meth:`local` results concatenated in order (ranks' shares of one update)."""
        rests = {p["rest"] for p in parts}
        head = [v for p in parts for v in p["head"]][:4]
        tail = [v for p in parts for v in p["tail"]][-4:]
        total = 0.0
        for p in parts:
            total += p["total"]
        return {"rows": sum(p["rows"] for p in parts), "numel": sum(p["numel"] for p in parts),
                "rest": parts[0]["rest"] if parts else (), "ragged": len(rests) > 1 or any(p["ragged"] for p in parts),
                "total": total, "head": head, "tail": tail,
                "shape": parts[0].get("shape") if len(parts) == 1 else None}

    @staticmethod
    def text(facts: dict[str, Any]) -> str:
        """The 16-hex digest of facts from :meth:`local` / :meth:`combine`."""
        if facts.get("shape") is not None:
            shape = tuple(facts["shape"])
        else:
            shape = (facts["numel"],) if facts["ragged"] else (facts["rows"], *facts["rest"])
        total = facts["total"] if facts["numel"] else 0.0
        text = f"{shape}|{total:.9g}|{facts['head']}|{facts['tail']}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def hexdigest(self) -> str:
        """The digest of everything added so far (this process only)."""
        return self.text(self.local())


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
    """Emits a header once, one update line per update (:meth:`begin` ... :meth:`end`), and a footer.

    :meth:`begin` may be called once per update with the whole update's batch, or once per micro-batch (as
    the micro-batches are drawn, e.g. before a prefetch overwrites them), or after the micro-step loop: every
    call until :meth:`end` adds to the same update, whose digest, tokens and samples describe all of it
    (the digest equals that of the concatenated batch).  The update's loss is what :meth:`end` is given, or,
    when ``end()`` gets none, the mean of the per-micro-batch losses passed as ``begin(x, loss=...)``.

    Step time is measured loop to loop: from the previous :meth:`end` (the first update: from its first
    :meth:`begin`) to this :meth:`end`, so data loading and logging between updates count, as they do on
    the wrapper's clock.

    ``optimizer`` (optional) gets a step post-hook that counts real ``step()`` calls;
    that count is reported as ``opt_step`` and its first param group's ``lr`` as ``lr``.
    ``tokens_per_update`` defaults to the first update's token count.  The model digest is taken at the
    first :meth:`begin` (the initial weights); the header is written with the first update line.
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
        self._model_digest: str | None = None
        self._versions: dict[str, str] | None = None
        self._open = False
        self._t0 = 0.0
        self._digest = BatchDigest()
        self._tokens = 0
        self._samples = 0
        self._explicit_tokens = False
        self._explicit_samples = False
        self._loss_sum: Any = None
        self._loss_n = 0
        self._seq = 0
        self._gn: float | None = None
        self._lr: float | None = None
        self._last_end: float | None = None
        self.phases: dict[str, float] = {}
        if optimizer is not None and hasattr(optimizer, "register_step_post_hook"):
            optimizer.register_step_post_hook(self._count_step)

    def _count_step(self, *_: Any) -> None:
        self.opt_steps += 1

    def _header(self, tokens: int) -> None:
        tpu = self.tokens_per_update if self.tokens_per_update is not None else int(tokens)
        self.rx.header(
            self._model_digest or model_digest(self.model),
            param_count(self.model),
            self.precision,
            self.world_size,
            tpu,
            self._seq,
            versions=self._versions or software_versions(),
            extra=self.extra,
        )
        self._header_done = True

    def begin(self, batch: Any, tokens: int | None = None, samples: int | None = None, loss: Any = None) -> None:
        """Add ``batch`` (the whole update's input, or one micro-batch of it) to the current update.

        The first call after :meth:`end` opens the update: it reads the learning rate and (first update
        only) takes the model digest and starts the clock.  ``tokens``/``samples`` override the counts taken
        from ``batch.numel()``/``batch.shape[0]`` (they add up over the calls of one update; under DDP they
        describe all ranks).  ``loss``: this micro-batch's own loss (its mean, before any division by the
        accumulation steps); ``end()`` without a loss reports the mean of these.  No host synchronisation.
        """
        if not self._open:
            self._open = True
            if self._model_digest is None:
                self._model_digest = model_digest(self.model)
                self._versions = software_versions()
            self._digest = BatchDigest()
            self._tokens = self._samples = 0
            self._explicit_tokens = self._explicit_samples = False
            self._loss_sum, self._loss_n = None, 0
            self._seq = self.seq_len if self.seq_len is not None else int(batch.shape[-1]) if batch.dim() > 1 else 1
            self._gn = None
            self._lr = float(self.optimizer.param_groups[0]["lr"]) if self.optimizer is not None else None
            self.phases = {}
            if self._last_end is None:
                _sync()
                self._t0 = time.perf_counter()
            else:
                self._t0 = self._last_end
        self._digest.add(batch)
        self._tokens += int(tokens if tokens is not None else batch.numel())
        self._samples += int(samples if samples is not None else (batch.shape[0] if batch.dim() else 1))
        self._explicit_tokens |= tokens is not None
        self._explicit_samples |= samples is not None
        if loss is not None:
            value = loss.detach().float() if hasattr(loss, "detach") else float(loss)
            self._loss_sum = value if self._loss_sum is None else self._loss_sum + value
            self._loss_n += 1

    def grads(self) -> float:
        """Measure and remember the gradient norm now (call after backward, before the step)."""
        self._gn = grad_norm(self.model)
        return self._gn

    def _reduce(self, loss: float, gn: float, tokens: int, samples: int, facts: dict[str, Any]
                ) -> tuple[float, float, int, int, dict[str, Any]]:
        """Hook for the DDP adapter: combine per-rank values and digest facts (identity here)."""
        return loss, gn, tokens, samples, facts

    def end(self, loss: Any = None, grad_norm: float | None = None, lr: float | None = None,
            step_time_s: float | None = None) -> None:
        """Stop timing and write the update line.

        ``loss``: the update's loss; omitted, the mean of the ``begin(x, loss=...)`` values of this update.
        ``grad_norm`` overrides the value from :meth:`grads`; ``lr`` overrides the
        learning rate read at :meth:`begin` (the one this update used);
        ``step_time_s`` overrides the logger's own loop-to-loop timing.
        Raises ``RuntimeError`` when called without :meth:`begin`, and ``ValueError`` without any loss.
        """
        if not self._open:
            raise RuntimeError("ReceiptLogger.end() without begin(): call rl.begin(batch) in every update")
        if loss is None and self._loss_n == 0:
            raise ValueError("ReceiptLogger.end(): no loss (pass rl.end(loss) or rl.begin(x, loss=loss) per micro-batch)")
        _sync()
        self._open = False
        self.index += 1
        gn = grad_norm if grad_norm is not None else self._gn if self._gn is not None else 0.0
        if loss is None:
            mean = self._loss_sum / self._loss_n
            loss_f = float(mean.item()) if hasattr(mean, "item") else float(mean)
        else:
            loss_f = float(loss.detach().float().item()) if hasattr(loss, "detach") else float(loss)
        loss_f, gn, tokens, samples, facts = self._reduce(loss_f, float(gn), self._tokens, self._samples,
                                                          self._digest.local())
        if not self._header_done:
            self._header(tokens)
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
            float(lr or 0.0), BatchDigest.text(facts), dt, peak_mem_gib(), self.phases or None,
        )

    def finish(self, eval_loss: Any = None, extra: dict | None = None, norms: bool = True) -> None:
        """Write the footer: the number of updates logged, and the end-of-run numerics.

        ``eval_loss`` (a float or a 0-d tensor) is the loss on a fixed held-out batch after the last update
        (footer ``extra.eval``, compared by L4 ``eval_matches``); ``norms`` adds ``extra.param_norms`` =
        :func:`param_norms` of the final model (L4 ``params_match``).  ``extra`` is merged last (e.g.
        ``{"resume_loss": x}``).  A run that logged no update still gets its header first.
        """
        if not self._header_done and self._model_digest is not None:
            self._header(self.tokens_per_update or 0)
        out: dict[str, Any] = {}
        if eval_loss is not None:
            out["eval"] = float(eval_loss.detach().float().item()) if hasattr(eval_loss, "detach") else float(eval_loss)
        if norms and getattr(self.rx, "active", True):
            out["param_norms"] = param_norms(self.model)
        out.update(extra or {})
        self.rx.footer(self.index, extra=out or None)
