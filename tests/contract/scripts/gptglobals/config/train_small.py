# a config file for train.py: overrides its globals
batch_size = 8
gradient_accumulation_steps = 4
block_size = 256
compile = False
