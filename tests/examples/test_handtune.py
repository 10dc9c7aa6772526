"""bench/gpu/handtune.py and examples/nanogpt/flops.py, on the CPU (tiny size only)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nanogpt"
sys.path.insert(0, str(EXAMPLE))

from flops import PEAK_BF16_DENSE, flops_per_token, mfu  # noqa: E402
from model import GPT, SIZES, GPTConfig  # noqa: E402


def _shape(size: str) -> tuple[GPTConfig, int]:
    s = dict(SIZES[size])
    gb = s.pop("global_batch")
    return GPTConfig(**s), gb


def test_gpu_size_is_a_355m_model_with_64k_tokens_per_update() -> None:
    cfg, gb = _shape("gpt-355m")
    with torch.device("meta"):
        model = GPT(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert n >= 300_000_000
    assert gb * cfg.seq_len == 65_536
    # the matrix products of one block: q, k, v, out (d x d each) and the MLP (2 x d x 4d)
    assert model.matrix_params() == cfg.n_layer * 12 * cfg.d_model ** 2
    fpt = flops_per_token(cfg.n_layer, cfg.d_model, cfg.seq_len, cfg.vocab_size, model.matrix_params())
    assert fpt == 6 * (model.matrix_params() + cfg.vocab_size * cfg.d_model) + 12 * cfg.n_layer * cfg.d_model * cfg.seq_len
    # the paper's MFU: one update of 65,536 tokens at 0.33 s is ~48% of the 989.5 TFLOP/s peak
    assert mfu(fpt, 65_536, 0.33) == pytest.approx(fpt * 65_536 / (PEAK_BF16_DENSE * 0.33))
    assert 0.4 < mfu(fpt, 65_536, 0.33) < 0.6
    with pytest.raises(ValueError):
        flops_per_token(0, 1, 1, 1, 1)


def test_handtune_runs_tiny_configs_and_reports_mfu(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu" / "handtune.py"), "--size", "tiny",
                           "--updates", "5", "--window", "2", "5", "--configs", "eager-mb64", "--threads", "1",
                           "--json", str(out), "--logdir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "best: eager-mb64" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["name"] for r in rows] == ["eager-mb64"]
    row = rows[0]
    log = (tmp_path / "logs" / "eager-mb64.log").read_text()
    steps = [float(line.split("| step ")[1].split(" ms")[0]) / 1000 for line in log.splitlines()
             if line.startswith("update")]
    assert len(steps) == 5
    assert row["median_step_s"] == pytest.approx(statistics.median(steps[1:5]))
    assert row["tokens_per_s"] == pytest.approx(4096 / row["median_step_s"])
    assert row["mfu"] == pytest.approx(row["flops_per_token"] * 4096 / (PEAK_BF16_DENSE * row["median_step_s"]))


def test_handtune_rejects_unknown_config() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu" / "handtune.py"), "--configs", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown configuration 'nope'" in proc.stderr
