"""verifier/numerics.py on its own: precision classes, the tolerance formula, repeat noise, curve and norm comparisons."""

from __future__ import annotations

import math

import pytest

from infrarsi.verifier import numerics as nm


@pytest.mark.parametrize("text,klass", [
    ("fp32", "fp32"), ("float32", "fp32"), ("fp64", "fp32"), ("tf32", "tf32"), ("amp-bf16", "bf16"),
    ("bf16", "bf16"), ("fp16", "fp16"), ("amp-fp16", "fp16"), ("fp8-e4m3", "fp8"), ("int4?", None), (None, None),
])
def test_precision_class(text, klass):
    assert nm.precision_class(text) == klass


def test_comparison_class_is_the_lower_precision():
    assert nm.comparison_class("fp32", "fp32") == "fp32"
    assert nm.comparison_class("amp-bf16", "fp32") == "bf16" == nm.comparison_class("fp32", "bf16")
    assert nm.comparison_class("tf32", "fp16") == "fp16"
    assert nm.comparison_class("weird", "fp32") is None


def test_calibrate_is_min_cap_max_k_sigma_floor():
    floor = nm.FLOORS["fp32"]["loss"]
    t = nm.calibrate("loss", "fp32", 0.0, 0.03)                     # deterministic repeats: the floor
    assert t.value == floor and t.source == "floor" and "fp32 floor" in t.describe()
    t = nm.calibrate("loss", "fp32", 1e-3, 0.03)                    # noisy repeats: K sigma
    assert t.value == pytest.approx(nm.K_SIGMA * 1e-3) and t.source == "repeats"
    t = nm.calibrate("loss", "fp32", 0.1, 0.03)                     # never above the cap
    assert t.value == 0.03 and t.source == "cap" and t.noisy
    t = nm.calibrate("loss", None, 0.0, 0.03)                       # unknown precision: the cap alone
    assert t.value == 0.03 and "unknown" in t.describe()
    assert nm.calibrate("loss", "fp32", None, 0.03).value == floor  # one reference: sigma unknown
    broken = nm.calibrate("loss", "fp32", math.inf, 0.03)          # a non-finite reference never widens to inf
    assert broken.value == floor and not broken.noisy
    assert nm.calibrate("grad_norm", "bf16", 0.0, nm.cap_for("grad_norm", 0.03, 0.03)).value == pytest.approx(0.1)
    with pytest.raises(ValueError, match="quantity"):
        nm.calibrate("speed", "fp32", 0.0, 0.03)
    with pytest.raises(ValueError, match="cap"):
        nm.calibrate("loss", "fp32", 0.0, 0.0)


def test_floors_widen_as_precision_drops():
    for q in nm.QUANTITIES:
        vals = [nm.FLOORS[c][q] for c in ("fp32", "tf32", "bf16")]
        assert vals == sorted(vals) and vals[0] < vals[-1]


def test_repeat_sigma_known_values():
    assert nm.repeat_sigma([[1.0, 2.0]]) == (None, 0.0)
    sigma, worst = nm.repeat_sigma([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    assert sigma == 0.0 and worst == 0.0
    sigma, worst = nm.repeat_sigma([[1.01], [0.99]])               # d = 0.02 relative to the mean 1.0
    assert worst == pytest.approx(0.02) and sigma == pytest.approx(0.02 / math.sqrt(2))
    assert nm.scalar_sigma([1.01, 0.99]) == pytest.approx(0.02 / math.sqrt(2))


def test_compare_curve_per_update_and_window_fallback():
    ref = [[3.0, 2.0, 1.5, 1.2]]
    tol = nm.calibrate("loss", "fp32", 0.0, 0.03)
    ok = nm.compare_curve("loss", [3.0, 2.0, 1.5, 1.2], ref, tol, (2, 4))
    assert ok.ok and "\n" not in ok.message
    bad = nm.compare_curve("loss", [3.0, 2.0, 1.5 * 1.01, 1.2], ref, tol, (2, 4))
    assert not bad.ok and bad.worst_update == 3 and "update 3 of 4" in bad.message
    window = nm.compare_curve("loss", [3.0, 2.0, 1.5 * 1.01, 1.2], ref, tol, (2, 4), per_update=False)
    assert window.ok and "window-mean" in window.message
    nan = nm.compare_curve("loss", [3.0, math.nan, 1.5, 1.2], ref, tol, (2, 4))
    assert not nan.ok and "non-finite" in nan.message
    assert not nm.compare_curve("loss", [], ref, tol, (2, 4)).ok


def test_norms_deviation_is_a_vector_ratio():
    ref = {"w": 3.0, "b": 4.0}
    assert nm.norms_deviation(ref, ref) == 0.0
    assert nm.norms_deviation({"w": 3.0, "b": 4.5}, ref) == pytest.approx(0.1)
    assert nm.norms_deviation({"w": 3.0}, ref) == math.inf
    assert nm.norms_deviation({"w": math.nan, "b": 4.0}, ref) == math.inf
    assert nm.norms_sigma([ref]) is None
    other = {"w": 3.0, "b": 4.5}
    assert nm.norms_sigma([ref, other]) == pytest.approx(nm.norms_deviation(ref, other) / math.sqrt(2))
    assert nm.mean_norms([ref, {"w": 5.0, "b": 4.0}]) == {"w": 4.0, "b": 4.0}
