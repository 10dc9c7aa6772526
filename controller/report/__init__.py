"""REPORT.md and progress.png for a finished campaign, rendered from its ``result.json`` dict.

``render_report(result) -> str`` and ``plot_progress(result, path) -> Path`` are pure
functions of the result (the plot writes only ``path``).
"""

from infrarsi.controller.report.markdown import render_report
from infrarsi.controller.report.plot import plot_progress

__all__ = ["render_report", "plot_progress"]
