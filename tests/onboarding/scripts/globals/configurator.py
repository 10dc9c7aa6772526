"""nanoGPT's configurator: ``python train.py [config.py] [--key=value ...]`` overrides train.py's globals.

Executed by train.py with ``exec(open('configurator.py').read())``; a value is parsed with ``literal_eval`` and must
keep the type of the global it replaces (``--fused_adamw=True``, not ``--fused_adamw=true``).
"""
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if '=' not in arg:
        assert not arg.startswith('--'), f"{arg}: expected --key=value"
        exec(open(arg).read())
    else:
        assert arg.startswith('--'), f"{arg}: expected --key=value"
        key, val = arg[2:].split('=', 1)
        if key not in globals():
            raise ValueError(f"Unknown config key: {key}")
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        if type(attempt) != type(globals()[key]):
            raise TypeError(f"--{key}={val}: expected a {type(globals()[key]).__name__}")
        globals()[key] = attempt
