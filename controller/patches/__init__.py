"""Patch intake: checks a candidate source diff before any trial runs it, and applies accepted ones.

See :mod:`infrarsi.controller.patches.intake` (``check_patch``, ``apply_patches``, ``load_patch_dir``)
and :mod:`infrarsi.controller.patches.diffparse` (the unified-diff reader they share).
"""

from infrarsi.controller.patches.diffparse import FileChange, parse_diff
from infrarsi.controller.patches.intake import PatchInfo, apply_patches, check_patch, glob_match, load_patch_dir

__all__ = ["FileChange", "PatchInfo", "apply_patches", "check_patch", "glob_match", "load_patch_dir", "parse_diff"]
