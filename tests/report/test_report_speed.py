"""REPORT.md shows which number the speedup is, the noise estimate, its bound and the runs behind it."""

from __future__ import annotations

from tests.report.conftest import make_promoted_result

from infrarsi.controller.report.markdown import render_report
from infrarsi.verifier.speed import pool_noise


def test_report_shows_estimate_bound_runs_and_sources() -> None:
    r = make_promoted_result()
    b = pool_noise([("reference runs", [0.0, 0.0009, 0.001]), ("candidate repeats", [0.0, 0.0056])],
                   [0.001, -0.0005, 0.0002])
    r["promotion"]["noise"] = b.to_dict()
    r["promotion"]["promotion_margin"] = b.margin
    r["promotion"]["candidates"] = {"abcdef0123456789": {"speedup": 1.4321, "pairs": 3, "interval": [1.41, 1.45]}}
    md = render_report(r)
    assert "sigma_pair 90% upper bound" in md and "Runs behind it" in md
    assert "5 (3 reference runs, 2 candidate repeats)" in md
    assert "exp(mean over back-to-back pairs of ln(T_ref / T_cand))" in md
    assert "1.4321x" in md and "1.4100x – 1.4500x" in md
    assert f"{100 * b.margin:.2f}%" in md


def test_report_without_bound_still_renders() -> None:
    r = make_promoted_result()
    md = render_report(r)
    assert "sigma_pair (paired log step-time noise)" in md and "Runs behind it" not in md
