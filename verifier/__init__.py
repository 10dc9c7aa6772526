"""infrarsi verifier: receipt emitter and adapters, exec wrapper, signing, the five-layer judge, the receipt matrix.

Training code imports only ``infrarsi.verifier.emit`` / ``infrarsi.verifier.adapters``; nothing here imports ``controller``.
See docs/verifier.md and docs/adapters.md.
"""
