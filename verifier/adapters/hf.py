"""Adapter for the Hugging Face ``Trainer``: a ``TrainerCallback`` that writes receipts.

``transformers`` is imported only when :func:`receipt_callback` is called, so this
module imports without it.  Usage (two added lines)::

    from infrarsi.verifier.adapters.hf import receipt_callback
    trainer = Trainer(..., callbacks=[receipt_callback(seq_len=S)])

The callback writes the header at ``on_train_begin`` (model digest of the initial
weights), one update line per ``on_step_end`` with the loss and gradient norm the
Trainer logs (``logging_steps=1`` gives every update a loss, the mean over its micro-batches; otherwise the
last logged value is repeated), and the footer at ``on_train_end``.  Step time is measured
between ``on_step_begin`` and ``on_step_end``.  The batch digest is the digest of all the
``input_ids`` the model's forward pre-hook sees in training mode during the step (every micro-batch
of a ``gradient_accumulation_steps`` update, concatenated).  The footer carries the
final parameters' per-tensor norms (``extra.param_norms``, L4 ``params_match``) and, when the
Trainer evaluated (``eval_loss`` in a log, e.g. ``trainer.evaluate()`` or an eval strategy
with a fixed eval set), the last ``eval_loss`` as ``extra.eval`` (L4 ``eval_matches``).
"""

from __future__ import annotations

import math
import time
from typing import Any

from infrarsi.verifier.emit import Receipts


def receipt_callback(seq_len: int, precision: str | None = None, receipts: Receipts | None = None) -> Any:
    """Build the callback instance; raises ``ImportError`` when transformers is absent."""
    from transformers import TrainerCallback  # noqa: PLC0415 - lazy by design

    from infrarsi.verifier.adapters import torch_loop as tl

    class InfrarsiReceiptCallback(TrainerCallback):  # type: ignore[misc, valid-type]
        """Writes one receipt line per optimizer update of the Trainer."""

        def __init__(self) -> None:
            self.rx = receipts if receipts is not None else Receipts.from_env()
            self.t0 = 0.0
            self.loss = math.nan
            self.grad_norm = math.nan
            self.digest = tl.BatchDigest()
            self.tokens = 0
            self.samples = 0
            self._hook: Any = None
            self.pending: dict[str, Any] | None = None
            self.eval_loss: float | None = None

        def _pre_hook(self, module: Any, args: Any, kwargs: Any) -> None:
            ids = kwargs.get("input_ids") if kwargs else None
            if ids is None and args:
                ids = args[0]
            if ids is not None and hasattr(ids, "numel") and module.training:
                self.digest.add(ids)  # every micro-batch of the update (no host synchronisation here)
                self.tokens += int(ids.numel())
                self.samples += int(ids.shape[0])

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            prec = precision or ("bf16" if args.bf16 else "fp16" if args.fp16 else "fp32")
            world = int(getattr(args, "world_size", 1))
            tpu = args.per_device_train_batch_size * args.gradient_accumulation_steps * world * seq_len
            self.rx.header(tl.model_digest(model), tl.param_count(model), prec, world, tpu, seq_len,
                           versions=tl.software_versions())
            self._hook = model.register_forward_pre_hook(self._pre_hook, with_kwargs=True)

        def _flush(self) -> None:
            # The Trainer logs after on_step_end, so the line waits for on_log (or the next step).
            if self.pending is not None:
                p, self.pending = self.pending, None
                self.rx.update(p["step"], self.loss, self.grad_norm, p["tokens"], p["samples"], seq_len,
                               p["step"], p["lr"], p["digest"], p["dt"], tl.peak_mem_gib())

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._flush()
            self.digest, self.tokens, self.samples = tl.BatchDigest(), 0, 0
            self.t0 = time.perf_counter()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            logs = logs or {}
            if "loss" in logs:
                self.loss = float(logs["loss"])
            if "grad_norm" in logs:
                self.grad_norm = float(logs["grad_norm"])
            if "eval_loss" in logs:
                self.eval_loss = float(logs["eval_loss"])
            self._flush()

        def on_step_end(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kw: Any) -> None:
            dt = time.perf_counter() - self.t0
            lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else 0.0
            self.pending = {"step": state.global_step, "tokens": self.tokens, "samples": self.samples,
                            "lr": lr, "digest": self.digest.hexdigest() if self.digest.parts else "", "dt": dt}

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            self._flush()
            if self._hook is not None:
                self._hook.remove()
            norms = tl.param_norms(model) if model is not None and self.rx.active else None
            self.rx.footer(state.global_step, eval_loss=self.eval_loss, param_norms=norms)

    return InfrarsiReceiptCallback()
