"""A tiny MLP language model trained in the style of a configurator script: settings are module globals,
overridden by ``--key=value`` arguments (configurator.py); one process, or several under ``torchrun`` (DDP,
gloo on the CPU).  The receipt lines are those docs/adapters.md gives for a torchrun/DDP loop that draws each
micro-batch inside the loop and keeps its own loss sum; each is marked ``# infrarsi +N`` (tests/onboarding counts
them).

    python train.py --batch_size=8 --gradient_accumulation_steps=4 --max_iters=100
    torchrun --standalone --nproc-per-node=2 train.py --max_iters=100
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from infrarsi.verifier.adapters.ddp import DDPReceiptLogger  # infrarsi +1

# -----------------------------------------------------------------------------
batch_size = 8  # micro-batch size per process
gradient_accumulation_steps = 4
block_size = 16
n_hidden = 64
max_iters = 1000
eval_interval = 250
log_interval = 10
learning_rate = 1e-2
dtype = 'float32'  # or 'bfloat16'
fused_adamw = False
seed = 7
# -----------------------------------------------------------------------------
exec(open('configurator.py').read())  # overrides from the command line
# -----------------------------------------------------------------------------

ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    dist.init_process_group(backend='nccl' if torch.cuda.is_available() else 'gloo')
rank, world = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
torch.set_num_threads(1)
VOCAB = 48
GLOBAL = world * gradient_accumulation_steps * batch_size  # samples per update, over all processes


def sample(k):
    """Sample ``k`` of the stream: a context window and its next token (a pure function of seed and k)."""
    g = torch.Generator().manual_seed(seed * 7919 + k)
    start = int(torch.randint(VOCAB, (1,), generator=g))
    seq = (start + torch.arange(block_size + 1) * 3) % VOCAB
    noise = torch.randint(VOCAB, (block_size + 1,), generator=g)
    seq = torch.where(torch.rand(block_size + 1, generator=g) < 0.1, noise, seq)
    return seq[:-1], seq[-1]


def micro_batch(update, step):
    """This process's ``step``-th micro-batch of ``update``: the update's samples are split among processes first
    (rank-major), then into micro-batches, so the concatenation over ranks is the same for every split."""
    first = update * GLOBAL + rank * (GLOBAL // world) + step * batch_size
    xs, ys = zip(*(sample(k) for k in range(first, first + batch_size)))
    return torch.stack(xs), torch.stack(ys)


torch.manual_seed(seed)
model = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Flatten(), nn.Linear(8 * block_size, n_hidden), nn.GELU(),
                      nn.Linear(n_hidden, VOCAB))
net = nn.parallel.DistributedDataParallel(model) if ddp else model
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, fused=fused_adamw or None)
rl = DDPReceiptLogger(net, optimizer, seq_len=block_size, precision='amp-bf16' if dtype == 'bfloat16' else 'fp32')  # infrarsi +2


def held_out_loss():
    """Mean loss on a fixed batch of samples training never sees (k < 0)."""
    with torch.no_grad():
        xs, ys = zip(*(sample(-1 - k) for k in range(64)))
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=dtype == 'bfloat16'):
            return F.cross_entropy(model(torch.stack(xs)).float(), torch.stack(ys)).item()


t0 = time.time()
for it in range(1, max_iters + 1):
    loss_accum = 0.0
    for step in range(gradient_accumulation_steps):
        x, y = micro_batch(it, step)
        rl.begin(x)  # infrarsi +3  this micro-batch (the logger gathers the ranks' shares at end)
        if ddp:
            net.require_backward_grad_sync = step == gradient_accumulation_steps - 1
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=dtype == 'bfloat16'):
            loss = F.cross_entropy(net(x).float(), y) / gradient_accumulation_steps
        loss_accum += loss.detach()
        loss.backward()
    rl.grads()  # infrarsi +4
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    rl.end(loss_accum)  # infrarsi +5  the update's mean loss (this script sums loss / accumulation steps)
    if rank == 0 and it % log_interval == 0:
        print(f"iter {it}: loss {float(loss_accum):.4f} ({(time.time() - t0) * 1000 / log_interval:.1f} ms/iter)",
              flush=True)
        t0 = time.time()
    if rank == 0 and eval_interval and it % eval_interval == 0:
        print(f"iter {it}: held-out loss {held_out_loss():.4f}", flush=True)
rl.finish(eval_loss=held_out_loss())  # infrarsi +6
if ddp:
    dist.barrier()
    dist.destroy_process_group()
