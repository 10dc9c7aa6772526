"""examples/nanogpt/data.py purity and train.py's flag checks (fast, no training)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"
sys.path.insert(0, str(EXAMPLE))

import data  # noqa: E402


def test_update_batch_is_a_pure_function_of_seed_and_update() -> None:
    a = data.update_batch(7, 3, 16, 32, 128)
    assert a.shape == (16, 33) and a.dtype == torch.int64
    assert torch.equal(a, data.update_batch(7, 3, 16, 32, 128))
    assert not torch.equal(a, data.update_batch(7, 4, 16, 32, 128))
    assert not torch.equal(a, data.update_batch(8, 3, 16, 32, 128))
    assert int(a.min()) >= 0 and int(a.max()) < 128
    # sequence k does not depend on how many sequences the update holds
    assert torch.equal(data.update_batch(7, 3, 8, 32, 128), a[:8])


@pytest.mark.parametrize("micro", [1, 2, 4, 16])
def test_every_split_concatenates_to_the_update_batch(micro: int) -> None:
    batch = data.update_batch(1, 1, 16, 8, 64)
    parts = [data.micro_batch(batch, j, micro) for j in range(16 // micro)]
    assert torch.equal(torch.cat(parts), batch)
    with pytest.raises(ValueError):
        data.micro_batch(batch, 16 // micro, micro)


def test_micro_batch_must_divide() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        data.micro_batch(data.update_batch(1, 1, 16, 8, 64), 0, 3)


def test_the_language_is_learnable() -> None:
    """Most transitions follow the successor table, so the entropy is far below ln(vocab)."""
    vocab = 256
    b = data.update_batch(1337, 1, 64, 64, vocab)
    succ = torch.from_numpy(data.successor_table(1337, vocab))
    follow = (succ[b[:, :-1]] == b[:, 1:]).float().mean().item()
    assert abs(follow - (1 - data.NOISE)) < 0.05
    entropy = -(follow * math.log(follow) + (1 - follow) * math.log((1 - follow) / vocab))
    assert entropy < 0.5 * math.log(vocab)


def test_train_refuses_a_split_that_changes_the_batch() -> None:
    proc = subprocess.run([sys.executable, "train.py", "--size", "tiny", "--micro-batch", "3", "--updates", "1"],
                          cwd=EXAMPLE, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--micro-batch 3 must divide the global batch 64" in proc.stderr
    proc = subprocess.run([sys.executable, "train.py", "--size", "tiny", "--micro-batch", "4", "--grad-accum", "8",
                           "--updates", "1"], cwd=EXAMPLE, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--grad-accum 8 != global batch 64 / --micro-batch 4" in proc.stderr
