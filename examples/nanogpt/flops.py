"""Model FLOPs per token and MFU, by the InfraRSI paper's formula (PaLM dense-equivalent FLOPs).

FLOPs per token = 6 x (matrix parameters of the transformer blocks + the LM head,
``vocab * d_model``) + attention ``12 * n_layer * d_model * seq_len``.  Recomputation
(activation checkpointing) is not counted.  MFU divides by the dense BF16 peak of one
Hopper GPU, 989.5 TFLOP/s.
"""

from __future__ import annotations

#: dense (non-sparse) BF16 peak of one H100/H200, FLOP/s, the paper's MFU denominator
PEAK_BF16_DENSE = 989.5e12


def flops_per_token(n_layer: int, d_model: int, seq_len: int, vocab: int, n_params_matrix: int) -> int:
    """Training FLOPs per token (forward + backward).

    ``n_params_matrix`` counts the weights of the matrix products inside the transformer
    blocks only (attention q/k/v/output and MLP; no biases, norms, embeddings or LM
    head); the LM head is added here from ``vocab * d_model``.
    """
    if min(n_layer, d_model, seq_len, vocab) <= 0 or n_params_matrix < 0:
        raise ValueError("flops_per_token needs positive sizes")
    return 6 * (int(n_params_matrix) + int(vocab) * int(d_model)) + 12 * int(n_layer) * int(d_model) * int(seq_len)


def mfu(flops_token: float, tokens_per_update: int, step_time_s: float, n_gpus: int = 1,
        peak: float = PEAK_BF16_DENSE) -> float:
    """Model FLOPs utilization (0..1) of an update of ``tokens_per_update`` taking ``step_time_s``."""
    if step_time_s <= 0 or n_gpus <= 0:
        raise ValueError("mfu needs a positive step time and GPU count")
    return flops_token * tokens_per_update / (n_gpus * peak * step_time_s)
