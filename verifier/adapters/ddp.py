"""Adapter for torchrun / DistributedDataParallel jobs (torch imported lazily).

Every rank calls the same methods; per-rank loss and gradient norm are averaged and
tokens/samples summed with one all-reduce, and only rank 0 writes (``Receipts``
is a no-op elsewhere because ``RANK`` != 0)::

    from infrarsi.verifier.adapters.ddp import DDPReceiptLogger
    rl = DDPReceiptLogger(ddp_model, optimizer, seq_len=S)
    ... the same begin(x) / grads() / end(loss) / finish() calls as the plain loop ...

``begin`` receives this rank's share of the update's batch; the shares are
all-gathered (in rank order) so the digest, token and sample counts describe the
whole update's batch, equal to a single-process run of the same global batch.
Shares must have the same shape on every rank.
"""

from __future__ import annotations

from typing import Any

from infrarsi.verifier.adapters.torch_loop import ReceiptLogger


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class DDPReceiptLogger(ReceiptLogger):
    """:class:`ReceiptLogger` whose values are reduced across the process group.

    ``model`` may be the DDP wrapper; its ``.module`` is digested so the digest
    matches a single-process run of the same model.  ``tokens_per_update`` in the
    header defaults to the gathered first batch's ``numel()``.
    """

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        dist = _dist()
        world = dist.get_world_size() if dist is not None else 1
        kwargs.setdefault("world_size", world)
        super().__init__(getattr(model, "module", model), optimizer, **kwargs)

    def begin(self, batch: Any, tokens: int | None = None, samples: int | None = None) -> None:
        """Gather every rank's share of the batch, then start the update as the plain logger does."""
        dist = _dist()
        if dist is not None and dist.get_world_size() > 1:
            import torch

            dev = batch.device if dist.get_backend() == "nccl" else torch.device("cpu")
            local = batch.detach().to(dev).contiguous()
            parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, local)
            batch = torch.cat(parts, 0)
        super().begin(batch, tokens, samples)

    def _reduce(self, loss: float, gn: float, tokens: int, samples: int) -> tuple[float, float, int, int]:
        """Average loss and gradient norm over ranks (tokens/samples already global)."""
        dist = _dist()
        if dist is None:
            return loss, gn, tokens, samples
        import torch

        backend = dist.get_backend()
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        t = torch.tensor([loss, gn], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        w = dist.get_world_size()
        vals = t.cpu().tolist()
        return vals[0] / w, vals[1] / w, tokens, samples
