"""progress.png: a real PNG from real matplotlib for every result shape, and the best-so-far line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infrarsi.controller.report import plot_progress
from infrarsi.controller.report.plot import best_so_far

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["promoted_result", "null_result", "rejected_result"])
def test_plot_writes_a_png(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    out = plot_progress(request.getfixturevalue(name), tmp_path / "sub" / "progress.png")
    assert out == tmp_path / "sub" / "progress.png"
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000  # a real figure, not an empty canvas
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 400 and height > 200


def test_plot_with_no_trials(tmp_path: Path) -> None:
    out = plot_progress({"trials": [], "delivered_speedup": None}, tmp_path / "p.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_best_so_far_counts_only_accepted_search_trials(rejected_result: dict[str, Any]) -> None:
    pts = best_so_far(rejected_result)
    ok = [t for t in rejected_result["trials"] if t["stage"] == "search" and t["outcome"] == "ok"]
    assert pts[0] == (0.0, 1.0)
    # the rejected 3x trial never lifts the line; the accepted one does
    assert max(y for _, y in pts) == pytest.approx(max(t["speedup"] for t in ok))
    assert pts[-1][0] == pytest.approx(ok[-1]["cum_gpu_hours"])


def test_best_so_far_is_monotone_and_ignores_promotion(promoted_result: dict[str, Any]) -> None:
    pts = best_so_far(promoted_result)
    ys = [y for _, y in pts]
    assert ys == sorted(ys) and len(ys) == 3  # reference start + two improving search trials
    xs = [x for x, _ in pts]
    promo_x = [t["cum_gpu_hours"] for t in promoted_result["trials"] if t["stage"] == "promotion"]
    assert not set(xs) & set(promo_x)


def test_positions_fall_back_to_running_sum_of_gpu_hours(rejected_result: dict[str, Any], tmp_path: Path) -> None:
    for t in rejected_result["trials"]:
        t["cum_gpu_hours"] = None
    pts = best_so_far(rejected_result)
    want = sum(t["gpu_hours"] for t in rejected_result["trials"])  # the improving trial is the last one
    assert pts[-1][0] == pytest.approx(want)
    assert plot_progress(rejected_result, tmp_path / "p.png").stat().st_size > 10_000
