"""Deterministic generated token data (FROZEN: the task contract hashes this file).

The "language" is a noisy Markov chain over ``vocab`` tokens: after token ``t`` comes
``succ[t]`` with probability ``1 - noise``, otherwise a uniformly random token.
``succ`` is a fixed random permutation drawn from the seed, so a model can learn it
and the loss falls from ``ln(vocab)`` towards the chain's entropy.

Purity contract (what makes micro-batch / grad-accum splits comparable):

* :func:`update_batch` ``(seed, update, global_batch, seq_len, vocab)`` returns the
  whole update's tokens, shape ``(global_batch, seq_len + 1)`` int64, on the CPU.
  Sequence ``k`` of update ``i`` is drawn from its own generator seeded with
  ``(seed, i, k)``, so it does not depend on how the batch is later split.
* :func:`micro_batch` ``(batch, j, micro)`` is rows ``[j*micro, (j+1)*micro)``: the
  concatenation of all micro-batches of one update is the update batch itself,
  whatever the split.

Nothing is downloaded; only numpy and torch are used.
"""

from __future__ import annotations

import numpy as np
import torch

NOISE = 0.2


def successor_table(seed: int, vocab: int) -> np.ndarray:
    """The chain's fixed successor permutation for ``seed`` (int64 array of length ``vocab``)."""
    return np.random.default_rng([int(seed), 0x5EED]).permutation(vocab).astype(np.int64)


_TABLES: dict[tuple[int, int], np.ndarray] = {}


def _table(seed: int, vocab: int) -> np.ndarray:
    key = (int(seed), int(vocab))
    if key not in _TABLES:
        _TABLES[key] = successor_table(seed, vocab)
    return _TABLES[key]


def update_batch(seed: int, update: int, global_batch: int, seq_len: int, vocab: int) -> torch.Tensor:
    """All tokens of optimizer update ``update`` (1-based): int64 tensor ``(global_batch, seq_len + 1)``.

    Inputs are ``[:, :-1]`` and next-token targets ``[:, 1:]``.  Raises ValueError on
    non-positive sizes.
    """
    if global_batch <= 0 or seq_len <= 0 or vocab <= 1:
        raise ValueError(f"bad sizes: global_batch={global_batch} seq_len={seq_len} vocab={vocab}")
    succ = _table(seed, vocab)
    n = seq_len + 1
    start = np.empty(global_batch, dtype=np.int64)
    flip = np.empty((global_batch, n), dtype=bool)
    rand = np.empty((global_batch, n), dtype=np.int64)
    for k in range(global_batch):
        rng = np.random.default_rng([int(seed), int(update), k])
        start[k] = rng.integers(vocab)
        flip[k] = rng.random(n) < NOISE
        rand[k] = rng.integers(0, vocab, n)
    out = np.empty((global_batch, n), dtype=np.int64)
    out[:, 0] = start
    for t in range(1, n):
        out[:, t] = np.where(flip[:, t], rand[:, t], succ[out[:, t - 1]])
    return torch.from_numpy(out)


def micro_batch(batch: torch.Tensor, j: int, micro: int) -> torch.Tensor:
    """Micro-batch ``j`` (0-based) of ``micro`` sequences from an :func:`update_batch` result."""
    if micro <= 0 or batch.shape[0] % micro:
        raise ValueError(f"micro-batch {micro} does not divide the global batch {batch.shape[0]}")
    if not 0 <= j < batch.shape[0] // micro:
        raise ValueError(f"micro-step {j} out of range for micro-batch {micro}")
    return batch[j * micro:(j + 1) * micro]
