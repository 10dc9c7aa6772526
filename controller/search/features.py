"""Indicator features over candidates: one per non-reference knob setting, one per
patch, and one per *enabling pair* admitted into the model during search.

The time model regresses ``y = ln(T0/T)`` on these features (no intercept: the
reference has all-zero features).  The memory model uses the same singles plus
an intercept column (the reference's peak memory).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from infrarsi.controller.search.space import PATCH, Candidate, SearchSpace, Setting, settings_key


class FeatureMap:
    """Maps candidates to indicator vectors.  ``pairs`` may grow; singles are fixed by the space."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.singles: list[Setting] = []
        for k in space.knobs:
            for v in k.values:
                if v != k.reference:
                    self.singles.append((k.name, v))
        self.singles += [(PATCH, p) for p in space.patches]
        self.index: dict[Setting, int] = {s: i for i, s in enumerate(self.singles)}
        self.pairs: list[tuple[Setting, Setting]] = []
        self._pair_index: dict[tuple[Setting, Setting], int] = {}

    @staticmethod
    def pair_key(a: Setting, b: Setting) -> tuple[Setting, Setting]:
        return (a, b) if settings_key(a) <= settings_key(b) else (b, a)

    def add_pair(self, a: Setting, b: Setting) -> bool:
        """Admit an enabling pair; returns False if it was already present."""
        key = self.pair_key(a, b)
        if key in self._pair_index:
            return False
        self._pair_index[key] = len(self.singles) + len(self.pairs)
        self.pairs.append(key)
        return True

    @property
    def dim(self) -> int:
        return len(self.singles) + len(self.pairs)

    def encode_settings(self, settings: frozenset[Setting]) -> np.ndarray:
        x = np.zeros(self.dim)
        for s in settings:
            i = self.index.get(s)
            if i is not None:
                x[i] = 1.0
        for j, (a, b) in enumerate(self.pairs):
            if a in settings and b in settings:
                x[len(self.singles) + j] = 1.0
        return x

    def encode(self, cands: Sequence[Candidate]) -> np.ndarray:
        if not cands:
            return np.zeros((0, self.dim))
        return np.vstack([self.encode_settings(c.settings(self.space)) for c in cands])

    def label(self, i: int) -> str:
        if i < len(self.singles):
            return settings_key(self.singles[i])
        a, b = self.pairs[i - len(self.singles)]
        return f"{settings_key(a)} & {settings_key(b)}"
