"""The receipt matrix's tiny CPU training job, with switchable perturbations.

A bigram language model (embedding -> 2 hidden layers -> vocabulary, ~3.5k
parameters) trained with AdamW and a warm-up/cosine schedule on generated token
sequences.  Each update sleeps a fixed simulated compute time split over forward,
backward and optimizer, so both clocks see step times that dominate scheduler jitter.
Receipts go through :class:`infrarsi.verifier.adapters.torch_loop.ReceiptLogger` (or the DDP
logger under torchrun), exactly as a user's loop would.

``--perturb NAME`` changes the training code or what it reports (see PERTURBATIONS);
everything else is the reference.  Run: ``python -m infrarsi.verifier.matrix.train [--perturb X]``.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
import traceback
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from infrarsi.verifier.adapters.ddp import DDPReceiptLogger
from infrarsi.verifier.adapters.torch_loop import ReceiptLogger
from infrarsi.verifier.emit import Receipts

VOCAB, DIM, HIDDEN = 32, 16, 32

PERTURBATIONS = (
    "none", "fewer_updates", "early_exit_0", "hang", "self_kill", "crash", "skip_opt_step", "lr_schedule",
    "deferred_final_update", "shuffled_order", "different_data", "dropped_layer", "changed_init",
    "no_model_digest", "no_batch_digest", "edit_frozen", "nan_loss", "inf_loss", "frozen_loss",
    "frozen_grad_norm", "oom", "traceback_exit0", "nccl_error", "cuda_error", "memory_over_cap", "fast_clock",
    "timer_excludes_optimizer", "burst_emission", "broken_grad_path", "misreported_loss", "grad_scaled",
    "warmup_spikes", "reduction_order", "nccl_after_end", "extra_logging", "prefetch_data", "foreach_off",
    "zero_grad_keep", "checkpoint_save",
    # numerical cheats that choose where to cheat (docs/verifier.md, "Numerics"); run them with --micro >= 2
    "skip_after_first", "skip_after_k", "skip_every_third", "half_sequence_loss", "grad_rescaled", "clip_trajectory",
)
#: skip_after_k: this many honest updates before the cheat starts (the window starts at update 5)
HONEST_K = 4


def skip_half(perturb: str, update: int) -> bool:
    """Whether a skip-style cheat computes only the first half of update ``update``'s micro-batches."""
    return (perturb == "skip_after_first" and update > 1) or (perturb == "skip_after_k" and update > HONEST_K) \
        or (perturb == "skip_every_third" and update % 3 == 0)


class Net(nn.Module):
    """Embedding -> Linear -> GELU -> (residual Linear -> GELU) -> vocabulary logits."""

    def __init__(self, drop_layer: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = None if drop_layer else nn.Linear(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x: torch.Tensor, detach_hidden: bool = False) -> torch.Tensor:
        z = F.gelu(self.fc1(self.emb(x)))
        if self.fc2 is not None:
            z = z + F.gelu(self.fc2(z))
        if detach_hidden:
            z = z.detach()
        return self.out(z)


def make_data(updates: int, batch: int, seq: int, seed: int) -> torch.Tensor:
    """[updates, batch, seq+1] token ids from a noisy fixed-permutation Markov chain."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(VOCAB, generator=g)
    data = torch.empty(updates, batch, seq + 1, dtype=torch.long)
    cur = torch.randint(0, VOCAB, (updates, batch), generator=g)
    for t in range(seq + 1):
        data[:, :, t] = cur
        noise = torch.randint(0, VOCAB, (updates, batch), generator=g)
        keep = torch.rand(updates, batch, generator=g) < 0.85
        cur = torch.where(keep, perm[cur], noise)
    return data


def held_out_loss(model: nn.Module, a: argparse.Namespace, autocast_dtype: torch.dtype | None) -> float:
    """Loss of the final model on a fixed held-out batch (another data seed), eval mode, no gradients."""
    held = make_data(1, a.batch, a.seq, a.data_seed + 1000)[0]
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logits = model(held[:, :-1])
    model.train()
    return float(F.cross_entropy(logits.float().reshape(-1, VOCAB), held[:, 1:].reshape(-1)))


def host_peak_gib() -> float:
    """Peak resident memory of this process in GiB (the CPU stand-in for device memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class ReportFilter:
    """Wraps the emitter to apply reporting perturbations (what the job claims, not what it computes)."""

    def __init__(self, rx: Receipts, perturb: str) -> None:
        self.rx, self.p = rx, perturb
        self.first: dict[str, float] = {}
        self.buffer: list[tuple[str, tuple, dict]] = []

    def _emit(self, name: str, *a: Any, **kw: Any) -> None:
        if self.p == "burst_emission" and name != "header":
            self.buffer.append((name, a, kw))
            if name == "footer":
                for n, aa, kk in self.buffer:
                    getattr(self.rx, n)(*aa, **kk)
            return
        getattr(self.rx, name)(*a, **kw)

    def header(self, model_digest: str, *a: Any, **kw: Any) -> None:
        self._emit("header", "" if self.p == "no_model_digest" else model_digest, *a, **kw)

    def update(self, index: int, loss: float, grad_norm: float, tokens: int, samples: int, seq_len: int,
               opt_step: int, lr: float, batch_digest: str, step_time_s: float,
               peak_mem_gib: float | None = None, phases: dict | None = None) -> None:
        self.first.setdefault("loss", loss)
        self.first.setdefault("gn", grad_norm)
        if self.p == "frozen_loss" and index > 3:
            loss = self.first["loss"]
        if self.p == "frozen_grad_norm" and index > 3:
            grad_norm = self.first["gn"]
        if self.p == "misreported_loss":
            loss = loss * 0.9
        if self.p == "no_batch_digest":
            batch_digest = ""
        if self.p == "fast_clock":
            step_time_s *= 0.75
        self._emit("update", index, loss, grad_norm, tokens, samples, seq_len, opt_step, lr, batch_digest,
                   step_time_s, host_peak_gib(), phases)

    @property
    def active(self) -> bool:
        """As the wrapped emitter's (the logger adds the parameter norms only when lines are written)."""
        return self.rx.active

    def footer(self, completed: int, extra: dict | None = None) -> None:
        self._emit("footer", completed, extra)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--perturb", default="none", choices=PERTURBATIONS)
    p.add_argument("--updates", type=int, default=14)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--micro", type=int, default=1, help="micro-batches per update (gradient accumulation)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--compute-ms", type=float, default=50.0, help="simulated compute per update")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--frozen-file", default="frozen_config.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    P = a.perturb
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank, world = 0, 1
    if ddp:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed + (1 if P == "changed_init" else 0))
    torch.set_num_threads(1)
    model = Net(drop_layer=P == "dropped_layer")
    train_model: nn.Module = model
    if ddp:
        train_model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, foreach=P != "foreach_off")
    warm = a.warmup if P != "lr_schedule" else 1

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, a.updates - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    data = make_data(a.updates, a.batch, a.seq, a.data_seed + (1 if P == "different_data" else 0))
    if P == "shuffled_order":
        data = data[torch.randperm(a.updates, generator=torch.Generator().manual_seed(7))]
    if P == "prefetch_data":
        data = [d.clone() for d in data]  # materialise every batch up front (another data pipeline)
    n_updates = a.updates - 4 if P == "fewer_updates" else a.updates
    logger_cls = DDPReceiptLogger if ddp else ReceiptLogger
    rl = logger_cls(train_model, opt, seq_len=a.seq, precision=a.precision, tokens_per_update=a.batch * a.seq,
                    extra={"global_batch": a.batch})
    rl.rx = ReportFilter(rl.rx, P)  # type: ignore[assignment]
    f_s, b_s, o_s = (a.compute_ms * w / 1000 for w in (0.3, 0.4, 0.3))
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    pending_step = False
    t_prev: float | None = None
    big: list[torch.Tensor] = []
    for i in range(1, n_updates + 1):
        full = data[i - 1]
        if P == "deferred_final_update" and pending_step:
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            pending_step = False
        shard = full.chunk(world, 0)[rank] if ddp else full
        t0 = time.perf_counter()
        rl.begin(shard[:, :-1], tokens=full[:, :-1].numel(), samples=full.shape[0])
        if P == "warmup_spikes" and i <= 2:
            time.sleep(0.3)
        chunks = shard.chunk(a.micro, 0)
        if P == "reduction_order":
            chunks = chunks[::-1]
        if skip_half(P, i):  # every micro-batch is counted and digested (rl.begin above), half are computed
            chunks = chunks[:max(1, len(chunks) // 2)]
        used = sum(c.shape[0] for c in chunks)
        total = torch.zeros(())
        for c in chunks:
            x, y = c[:, :-1], c[:, 1:]
            if P == "half_sequence_loss":  # loss on the first half of each sequence; tokens reported in full
                x, y = x[:, : x.shape[1] // 2], y[:, : y.shape[1] // 2]
            time.sleep(f_s / a.micro)
            with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
                logits = train_model(x, detach_hidden=P == "broken_grad_path")
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1)) * (c.shape[0] / used)
            if P == "nan_loss" and i == 6:
                loss = loss * float("nan")
            if P == "inf_loss" and i == 6:
                loss = loss + float("inf")
            time.sleep(b_s / a.micro)
            scale = 4.0 if P == "grad_scaled" else 0.5 if P == "grad_rescaled" else 1.0
            (loss * scale).backward()
            total = total + loss.detach()
        gn = rl.grads()
        if P == "grad_rescaled":  # gradients x0.5, reported as if unscaled, and a doubled step to compensate
            gn *= 2.0
            for group in opt.param_groups:
                group["lr"] *= 2.0
        if P == "clip_trajectory":  # per-element clipping the reference does not do: same reports, another trajectory
            # (clipping the global norm only rescales the gradient, which AdamW ignores)
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.5 * gn / math.sqrt(sum(p.numel() for p in model.parameters())))
        t_opt = time.perf_counter()
        if P == "skip_opt_step" and i == 6:
            sched.step()
        elif P == "deferred_final_update":
            pending_step = True
        else:
            time.sleep(o_s)
            opt.step()
            if P == "grad_rescaled":
                for group in opt.param_groups:
                    group["lr"] /= 2.0
            opt.zero_grad(set_to_none=P != "zero_grad_keep")
            sched.step()
        t1 = time.perf_counter()
        # loop-to-loop step time (as the adapter measures it), minus the optimizer when the timer excludes it
        step_time = t1 - (t_prev if t_prev is not None else t0)
        if P == "timer_excludes_optimizer":
            step_time -= t1 - t_opt
        t_prev = t1
        if P == "memory_over_cap" and i == 7:
            big.append(torch.ones(2**28))  # 1 GiB of host memory, touched
        rl.end(total, grad_norm=gn, step_time_s=step_time)
        if P == "early_exit_0" and i == 9:
            sys.exit(0)
        if P == "hang" and i == 8:
            time.sleep(3600)
        if P == "self_kill" and i == 8:
            os.kill(os.getpid(), 9)
        if P == "crash" and i == 8:
            raise RuntimeError("simulated crash in the training loop")
        if P == "oom" and i == 6:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                         "capacity of 139.81 GiB of which 1.10 GiB is free.")
        if P == "traceback_exit0" and i == 5:
            try:
                raise ImportError("fused kernel extension failed to load")
            except ImportError:
                traceback.print_exc()
        if P == "nccl_error" and i == 5:
            print("host:123:456 [0] NCCL WARN Call to ibv_reg_mr failed: NCCL error: unhandled system error",
                  file=sys.stderr, flush=True)
        if P == "cuda_error" and i == 5:
            print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
        if P == "extra_logging":
            print(f"step {i} loss {float(total):.4f} (warnings are expected: none)", flush=True)
        if P == "edit_frozen" and i == 4:
            with open(a.frozen_file, "a") as fh:
                fh.write("\n")
    if P == "deferred_final_update" and pending_step:
        opt.step()
        sched.step()
    if P == "checkpoint_save" and rank == 0:
        torch.save(model.state_dict(), "checkpoint.pt")
    rl.finish(eval_loss=held_out_loss(model, a, autocast_dtype))  # + the final parameter norms (adapter)
    if P == "nccl_after_end":
        time.sleep(0.05)
        print("[rank0] NCCL WARN ProcessGroupNCCL destroyed with pending work: NCCL error at teardown",
              file=sys.stderr, flush=True)
    if ddp:
        import torch.distributed as dist

        dist.barrier()  # leave together: a rank exiting while the other still talks can fail the launcher
        dist.destroy_process_group()
        # gloo's worker threads can still be joinable when the interpreter tears down the DDP reducer that holds
        # the process group; C++ then aborts ("terminate called without an active exception", SIGABRT) after the
        # receipt is complete, about once in a few dozen runs on a loaded 2-core machine.  Everything is written
        # and flushed by now, so leave without running interpreter teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
