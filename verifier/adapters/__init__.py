"""Stack adapters: thin helpers that turn a training loop's values into receipt lines.

``torch_loop`` (plain PyTorch), ``ddp`` (torchrun / DistributedDataParallel) and ``hf``
(a Hugging Face ``TrainerCallback``).  Each imports its framework lazily.
"""
