"""An argparse training script written differently from examples/nanogpt: long dashed option names, store_true
and BooleanOptionalAction switches, a precision choice and a helper module.  Read by the scaffold tests only."""
from __future__ import annotations

import argparse

from layers import Block  # noqa: F401  (local module: editable)
import dataset  # noqa: F401  (local module: frozen)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="train a small transformer")
    group = parser.add_argument_group("batch")
    group.add_argument("--micro-batch-size", "-m", dest="micro_batch_size", type=int, default=16,
                       help="sequences per forward pass")
    group.add_argument("--gradient-accumulation-steps", type=int, default=4)
    group.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--max-steps", type=int, default=10_000)
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--attn-impl", choices=("eager", "sdpa", "flash_attention_2"), default="eager")
    parser.add_argument("--fused-adam", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--allow-tf32", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--data-dir", default="data")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    print(vars(args))


if __name__ == "__main__":
    main()
