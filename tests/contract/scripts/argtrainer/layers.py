"""Layers (editable)."""


class Block:
    pass
