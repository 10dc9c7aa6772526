"""A tiny character-level GPT trained the nanoGPT way: argparse flags, and the next micro-batch prefetched inside
the micro-step loop (``X, Y = get_batch('train')`` right after the forward pass), so the update's whole batch is
never in hand at once.  The receipt lines are those docs/adapters.md gives for such a loop; each is marked
``# infrarsi +N`` (tests/onboarding counts them).  Runs in seconds on the CPU; without the infrarsi exec wrapper the
adapter writes nothing.

    python train.py --batch_size=4 --gradient_accumulation_steps=8 --max_iters=200
"""
import argparse
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

from infrarsi.verifier.adapters.torch_loop import ReceiptLogger  # infrarsi +1

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--batch_size", type=int, default=4, help="micro-batch size")
parser.add_argument("--gradient_accumulation_steps", type=int, default=8)
parser.add_argument("--block_size", type=int, default=32)
parser.add_argument("--n_embd", type=int, default=32)
parser.add_argument("--max_iters", type=int, default=2000)
parser.add_argument("--eval_interval", type=int, default=500)
parser.add_argument("--log_interval", type=int, default=10)
parser.add_argument("--learning_rate", type=float, default=3e-3)
parser.add_argument("--dtype", type=str, default="float32", choices=["float32", "bfloat16"])
parser.add_argument("--optimizer", type=str, default="foreach", choices=["loop", "foreach", "fused"])
parser.add_argument("--seed", type=int, default=1337)
args = parser.parse_args()

torch.set_num_threads(1)
torch.manual_seed(args.seed)
VOCAB = 64
TEXT = torch.randint(0, VOCAB, (1 << 16,), generator=torch.Generator().manual_seed(0))
TEXT = (TEXT + torch.arange(TEXT.numel()) % 7) % VOCAB  # a learnable pattern under the noise
SPLIT = {"train": TEXT[: 60_000], "val": TEXT[60_000:]}
drawn = {"train": 0, "val": 0}


def get_batch(split):
    """The next ``batch_size`` samples of ``split``: sample k of a split always starts at the same offset, so the
    data of an update does not depend on how it is cut into micro-batches."""
    data = SPLIT[split]
    first = drawn[split]
    drawn[split] += args.batch_size
    starts = [int(torch.randint(len(data) - args.block_size - 1, (1,),
                                generator=torch.Generator().manual_seed(args.seed * 1_000_003 + k)))
              for k in range(first, first + args.batch_size)]
    x = torch.stack([data[s:s + args.block_size] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + args.block_size] for s in starts])
    return x, y


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, args.n_embd)
        self.pos = nn.Embedding(args.block_size, args.n_embd)
        self.blocks = nn.Sequential(Block(args.n_embd), Block(args.n_embd))
        self.head = nn.Linear(args.n_embd, VOCAB)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        logits = self.head(self.blocks(x))
        return logits, F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


model = GPT()
opt_kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.optimizer]
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, **opt_kw)
ctx = torch.autocast("cpu", dtype=torch.bfloat16) if args.dtype == "bfloat16" else nullcontext()
precision = "amp-bf16" if args.dtype == "bfloat16" else "fp32"
rl = ReceiptLogger(model, optimizer, seq_len=args.block_size, precision=precision)  # infrarsi +2


@torch.no_grad()
def held_out_loss():
    """Loss on the first validation samples (the same batch in every run; training never sees it)."""
    model.eval()
    drawn["val"] = 0
    losses = []
    for _ in range(args.gradient_accumulation_steps):
        X, Y = get_batch("val")
        with ctx:
            losses.append(model(X, Y)[1].item())
    model.train()
    return sum(losses) / len(losses)


X, Y = get_batch("train")  # fetch the very first batch
t0 = time.time()
for iter_num in range(1, args.max_iters + 1):
    for micro_step in range(args.gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            rl.begin(X, loss=loss)  # infrarsi +3  this micro-batch: digest it, note its loss
            loss = loss / args.gradient_accumulation_steps
        X, Y = get_batch("train")  # prefetch the next micro-batch while the model works
        loss.backward()
    rl.grads()  # infrarsi +4  gradient norm before clipping
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    rl.end()  # infrarsi +5  the update's line: mean loss of its micro-batches
    if iter_num % args.log_interval == 0:
        lossf = loss.item() * args.gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, time {(time.time() - t0) * 1000:.1f}ms", flush=True)
        t0 = time.time()
    if args.eval_interval and iter_num % args.eval_interval == 0:
        print(f"step {iter_num}: val loss {held_out_loss():.4f}", flush=True)
rl.finish(eval_loss=held_out_loss())  # infrarsi +6  footer: held-out loss and parameter norms
