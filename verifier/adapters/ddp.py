"""Adapter for torchrun / DistributedDataParallel jobs (torch imported lazily).

Every rank calls the same methods; only rank 0 writes (``Receipts`` is a no-op elsewhere because
``RANK`` != 0)::

    from infrarsi.verifier.adapters.ddp import DDPReceiptLogger
    rl = DDPReceiptLogger(ddp_model, optimizer, seq_len=S)
    ... the same begin(x) / grads() / end(loss) / finish() calls as the plain loop ...

``begin`` receives this rank's share of the update's batch: its whole share, or one micro-batch at a time.
At ``end`` one all-gather (per update) combines the ranks: the digest, token and sample counts describe the
whole update's batch as the concatenation of the ranks' shares in rank order (equal to a single-process run
of the same global batch), and loss and gradient norm are averaged over ranks.  ``begin`` itself runs no
collective, so a loop may call it on every micro-batch.
"""

from __future__ import annotations

from typing import Any

from infrarsi.verifier.adapters.torch_loop import BatchDigest, ReceiptLogger


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class DDPReceiptLogger(ReceiptLogger):
    """:class:`ReceiptLogger` whose values are combined across the process group.

    ``model`` may be the DDP wrapper; its ``.module`` is digested so the digest
    matches a single-process run of the same model.  ``tokens_per_update`` in the
    header defaults to the first update's token count over all ranks.  Counts passed
    explicitly (``begin(x, tokens=..., samples=...)``) already describe all ranks and are
    not summed again.
    """

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        dist = _dist()
        world = dist.get_world_size() if dist is not None else 1
        kwargs.setdefault("world_size", world)
        super().__init__(getattr(model, "module", model), optimizer, **kwargs)

    def _reduce(self, loss: float, gn: float, tokens: int, samples: int, facts: dict[str, Any]
                ) -> tuple[float, float, int, int, dict[str, Any]]:
        """One all-gather: mean loss and gradient norm, summed counts, the digest facts in rank order."""
        dist = _dist()
        if dist is None or dist.get_world_size() == 1:
            return loss, gn, tokens, samples, facts
        import torch

        mine = {"loss": loss, "gn": gn, "tokens": tokens, "samples": samples, "facts": facts}
        got: list[Any] = [None] * dist.get_world_size()
        if dist.get_backend() == "nccl":
            torch.cuda.set_device(torch.cuda.current_device())
        dist.all_gather_object(got, mine)
        w = len(got)
        loss_m = sum(g["loss"] for g in got) / w
        gn_m = sum(g["gn"] for g in got) / w
        tok = tokens if self._explicit_tokens else sum(int(g["tokens"]) for g in got)
        smp = samples if self._explicit_samples else sum(int(g["samples"]) for g in got)
        return loss_m, gn_m, tok, smp, BatchDigest.combine([g["facts"] for g in got])
