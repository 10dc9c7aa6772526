"""Train a GPT on generated data, with receipts for infrarsi (EDITABLE).

Written the way research code often is: fp32, naive attention, eager mode, a small
micro-batch with gradient accumulation, activation checkpointing on and a per-tensor
(``foreach=False``) AdamW.  Every one of those is a launch knob; the workload does not
change with them: ``--micro-batch`` x ``--grad-accum`` is always the size's global batch
(``--grad-accum`` is derived and, when given, must agree), the data of update ``i`` is a
pure function of ``(seed, i)`` (see ``data.py``), and the reported loss is the mean over
the whole global batch.

Usage::

    python train.py --size tiny --updates 30 --micro-batch 4
    python train.py --size gpt-355m --micro-batch 16 --dtype bf16 --attention sdpa --compile 1 \
        --activation-checkpointing 0 --optimizer-impl fused --tf32 1

``--optimizer-impl fused`` passes ``fused=True`` to AdamW on every device: torch >= 2.4
has a fused CPU kernel, so it is a real choice on the CPU too (an older torch raises,
and the trial fails like any crash).  Threads: ``NANOGPT_THREADS`` (default 1).
Exit code 2 on a bad flag combination.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import NoReturn

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data  # noqa: E402
from flops import flops_per_token  # noqa: E402
from model import GPT, SIZES, GPTConfig  # noqa: E402

try:  # receipts: a no-op outside the infrarsi exec wrapper; optional when infrarsi is not installed
    from infrarsi.verifier.adapters.torch_loop import (batch_digest, model_digest, param_count, param_norms,
                                                       peak_mem_gib, software_versions)
    from infrarsi.verifier.emit import Receipts
except ImportError:  # pragma: no cover - exercised only outside the project
    Receipts = None  # type: ignore[assignment,misc]


LR = {"tiny": 3e-3, "gpt-355m": 3e-4}
WARMUP = 5
EVAL_UPDATE = 0  # the held-out batch: data of "update 0", which training (updates 1..N) never sees


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=None, help="derived from the global batch; checked if given")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--attention", choices=["naive", "sdpa"], default="naive")
    p.add_argument("--compile", type=int, choices=[0, 1], default=0)
    p.add_argument("--activation-checkpointing", type=int, choices=[0, 1], default=1)
    p.add_argument("--optimizer-impl", choices=["loop", "foreach", "fused"], default="loop")
    p.add_argument("--tf32", type=int, choices=[0, 1], default=0)
    p.add_argument("--phase-timing", type=int, choices=[0, 1], default=0,
                   help="synchronize the GPU around phases so the phase split is exact (costs a little)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return p.parse_args(argv)


def fail(msg: str) -> NoReturn:
    """Report a bad flag combination and exit with status 2."""
    print(f"train.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def set_tf32(enabled: bool) -> None:
    """TF32 for fp32 matrix products and convolutions on CUDA (no effect on the CPU)."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def held_out_loss(fwd: torch.nn.Module, model: torch.nn.Module, seed: int, global_batch: int, seq_len: int,
                  vocab: int, micro_batch: int, device: torch.device, autocast: object) -> float:
    """Mean loss of the final model on the fixed held-out batch (``EVAL_UPDATE``), in eval mode, no gradients.

    Computed in micro-batches of the training micro-batch (bounded memory) under the same autocast; each
    micro-batch has the same size, so the mean of their losses is the batch mean.
    """
    batch = data.update_batch(seed, EVAL_UPDATE, global_batch, seq_len, vocab)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for j in range(global_batch // micro_batch):
            xb = data.micro_batch(batch, j, micro_batch)
            with autocast():  # type: ignore[operator]
                total += float(fwd(xb[:, :-1].to(device), xb[:, 1:].to(device)))
    model.train()
    return total * micro_batch / global_batch


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("NANOGPT_THREADS", "1")))
    shape = dict(SIZES[args.size])
    global_batch = shape.pop("global_batch")
    if args.micro_batch <= 0 or global_batch % args.micro_batch:
        fail(f"--micro-batch {args.micro_batch} must divide the global batch {global_batch}")
    grad_accum = global_batch // args.micro_batch
    if args.grad_accum is not None and args.grad_accum != grad_accum:
        fail(f"--grad-accum {args.grad_accum} != global batch {global_batch} / --micro-batch {args.micro_batch}")
    if args.updates < 1:
        fail("--updates must be >= 1")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    is_cuda = device.type == "cuda"
    if is_cuda:
        set_tf32(bool(args.tf32))

    cfg = GPTConfig(**shape, attention=args.attention, activation_checkpointing=bool(args.activation_checkpointing))
    seq_len = cfg.seq_len
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = GPT(cfg)
    model.train()
    fpt = flops_per_token(cfg.n_layer, cfg.d_model, seq_len, cfg.vocab_size, model.matrix_params())

    opt_kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.optimizer_impl]
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR[args.size], betas=(0.9, 0.95), weight_decay=0.1, **opt_kw)
    opt_steps = [0]
    optimizer.register_step_post_hook(lambda *_: opt_steps.__setitem__(0, opt_steps[0] + 1))
    fwd = torch.compile(model) if args.compile else model

    if args.dtype == "bf16":
        precision = "amp-bf16"
    elif is_cuda and args.tf32:
        precision = "tf32"
    else:
        precision = "fp32"
    rx = Receipts.from_env() if Receipts is not None else None
    tokens_per_update = global_batch * seq_len
    if rx is not None:
        rx.header(model_digest=model_digest(model), params=param_count(model), precision=precision, world_size=1,
                  tokens_per_update=tokens_per_update, seq_len=seq_len, versions=software_versions(),
                  extra={"global_batch": global_batch, "flops_per_token": fpt, "size": args.size,
                         "model_family": "nanogpt"})
    n_params = sum(p.numel() for p in model.parameters())
    print(f"size={args.size} params={n_params} flops_per_token={fpt} device={device} micro_batch={args.micro_batch} "
          f"grad_accum={grad_accum} dtype={args.dtype} attention={args.attention} compile={args.compile} "
          f"ckpt={args.activation_checkpointing} optimizer={args.optimizer_impl} tf32={args.tf32}", flush=True)

    sync = torch.cuda.synchronize if (is_cuda and args.phase_timing) else (lambda: None)
    autocast = (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)) if args.dtype == "bf16" \
        else nullcontext
    params = [p for p in model.parameters()]
    t_mark = time.perf_counter()  # each update is timed from the end of the previous one's receipt line
    for i in range(1, args.updates + 1):
        t0 = t_mark
        optimizer.zero_grad(set_to_none=False)
        lr = LR[args.size] * min(1.0, i / WARMUP)
        for group in optimizer.param_groups:
            group["lr"] = lr
        td = time.perf_counter()
        batch = data.update_batch(args.seed, i, global_batch, seq_len, cfg.vocab_size)
        phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "data": time.perf_counter() - td}
        loss_sum = 0.0
        tokens = 0
        samples = 0
        consumed = []
        for j in range(grad_accum):
            td = time.perf_counter()
            xb = data.micro_batch(batch, j, args.micro_batch)
            x = xb[:, :-1].to(device, non_blocking=True)
            y = xb[:, 1:].to(device, non_blocking=True)
            consumed.append(xb)
            tokens += x.numel()
            samples += x.shape[0]
            sync()
            tf = time.perf_counter()
            phases["data"] += tf - td
            with autocast():
                loss = fwd(x, y) / grad_accum
            sync()
            tb = time.perf_counter()
            phases["forward"] += tb - tf
            loss.backward()
            loss_sum += loss.item()
            sync()
            phases["backward"] += time.perf_counter() - tb
        to = time.perf_counter()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        loss_val = float(loss_sum)
        gn_val = float(gn)
        phases["optimizer"] = time.perf_counter() - to
        digest = batch_digest(torch.cat(consumed)) if rx is not None else ""
        step_time_s = time.perf_counter() - t0
        print(f"update {i:4d} | loss {loss_val:.6f} | gnorm {gn_val:.4f} | step {step_time_s * 1000:.2f} ms | "
              f"tok/s {tokens / step_time_s:.0f}", flush=True)
        if rx is not None:
            rx.update(index=i, loss=loss_val, grad_norm=gn_val, tokens=tokens, samples=samples, seq_len=seq_len,
                      opt_step=opt_steps[0], lr=lr, batch_digest=digest, step_time_s=step_time_s,
                      peak_mem_gib=peak_mem_gib(), phases=phases)
        t_mark = time.perf_counter()
    if rx is not None:  # end-of-run numerics: held-out loss and the final-parameter checksum (L4)
        ev = held_out_loss(fwd, model, args.seed, global_batch, seq_len, cfg.vocab_size, args.micro_batch, device,
                           autocast)
        print(f"eval loss {ev:.6f}", flush=True)
        rx.footer(completed=args.updates, eval_loss=ev, param_norms=param_norms(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
