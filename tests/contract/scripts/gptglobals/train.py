"""A nanoGPT-style training script (configurator globals): read by the scaffold tests, never run by them.

Settings are module globals, overridden by config files and --key=value arguments (configurator.py), the way
karpathy/nanoGPT's train.py is written.
"""
import os
import time

# I/O
out_dir = 'out'
eval_interval = 2000
log_interval = 1
eval_iters = 200
eval_only = False
always_save_checkpoint = True
wandb_log = False
# data
dataset = 'openwebtext'
gradient_accumulation_steps = 5 * 8  # used to simulate larger batch sizes
batch_size = 12  # micro-batch size
block_size = 1024
# model
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
# optimizer
learning_rate = 6e-4
max_iters = 600000
weight_decay = 1e-1
grad_clip = 1.0
# system
device = 'cuda'
dtype = 'bfloat16'
compile = True
fused_adamw = True
flash = True
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())  # overrides from command line or config file
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------


def main() -> None:
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    t0 = time.time()
    for _ in range(max_iters):
        pass
    print(os.getpid(), time.time() - t0)


if __name__ == '__main__':
    main()
