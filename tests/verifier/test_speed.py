"""THE speedup statistic (infrarsi.verifier.speed): window statistic, noise bound, paired speedup and gate."""

from __future__ import annotations

import math
import random

import pytest

from infrarsi.verifier import speed
from infrarsi.verifier.invariants import speed_reproduces


def _steps(rng: random.Random, n: int = 300, step: float = 0.1, jitter: float = 0.006) -> list[float]:
    return [step * math.exp(rng.gauss(0, jitter)) for _ in range(n)]


def test_window_statistic_is_the_mean_step_time() -> None:
    t = _steps(random.Random(1))
    w = speed.window_summary(t)
    assert w.step_time_s == pytest.approx(sum(t) / len(t), rel=1e-12) and w.clipped == 0
    assert w.log_stat == pytest.approx(math.log(sum(t) / len(t)))
    assert speed.window_log_statistic(t) == w.log_stat


def test_one_straggler_is_winsorized_but_never_the_last_step() -> None:
    t = _steps(random.Random(2))
    base = speed.window_summary(t).step_time_s
    spiked = list(t)
    spiked[137] *= 20.0  # a GC / checkpoint hiccup
    w = speed.window_summary(spiked)
    assert w.clipped == 1 and w.clipped_s > 1.8  # ~19 step times removed, and recorded
    assert w.step_time_s == pytest.approx(base, rel=0.001)
    assert w.plain_mean_s > 1.05 * base  # the raw mean would have moved by ~6%
    # work deferred to the window's last step (e.g. one final synchronisation) is never clipped
    last = list(t)
    last[-1] *= 20.0
    assert speed.window_summary(last).clipped == 0
    assert speed.window_summary(last).step_time_s == pytest.approx(sum(last) / len(last))


def test_frequent_stalls_are_real_cost_and_kept() -> None:
    t = _steps(random.Random(3))
    for i in range(0, len(t), 25):
        t[i] *= 2.0  # a data-loader stall every 25 steps: 12 of 300 > 1%
    w = speed.window_summary(t)
    assert w.clipped == 0 and w.step_time_s == pytest.approx(sum(t) / len(t))


def test_redistributing_time_among_steps_cannot_lower_the_statistic() -> None:
    """A job that emits its update lines in bursts: same total time, uneven steps.  A mean of logs (the old
    calibration statistic) would call it 10x faster; the window statistic does not move."""
    even = [0.1] * 40
    burst = ([0.0] * 9 + [1.0]) * 4
    assert speed.window_summary(burst).step_time_s == pytest.approx(speed.window_summary(even).step_time_s)
    geo = math.exp(sum(math.log(max(x, 1e-6)) for x in burst) / len(burst))
    assert geo < 0.01


@pytest.mark.parametrize("times, match", [([], "no step times"), ([0.1, -0.1], ">= 0"),
                                          ([0.1, math.nan], "finite"), ([0.0, 0.0], "no time passed"),
                                          (["x"], "numbers")])
def test_bad_step_times_are_one_line_errors(times: list, match: str) -> None:
    with pytest.raises(speed.SpeedError, match=match) as exc:
        speed.window_summary(times, "ref")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("ref:")
    assert math.isnan(speed.window_step_time(times))


def test_chi2_quantiles_match_scipy() -> None:
    from scipy.stats import chi2

    for nu in range(1, 80):
        assert speed.chi2_lower_quantile(nu) == pytest.approx(chi2.ppf(0.10, nu), rel=5e-4)
    for nu in (5, 30, 100):
        assert speed.chi2_lower_quantile(nu, 0.95) == pytest.approx(chi2.ppf(0.05, nu), rel=3e-2)
    with pytest.raises(speed.SpeedError, match="degrees of freedom"):
        speed.chi2_lower_quantile(0)


def test_ucb_covers_the_truth_at_its_level() -> None:
    """sigma estimated from nu dof: the 90% bound is below the true sigma in ~10% of draws."""
    rng = random.Random(4)
    for nu in (1, 3, 8):
        below = 0
        for _ in range(4000):
            est = math.sqrt(sum(rng.gauss(0, 1.0) ** 2 for _ in range(nu)) / nu)
            below += speed.sigma_ucb(est, nu) < 1.0
        assert 0.08 < below / 4000 < 0.12


def test_pool_noise_pools_every_repeat() -> None:
    only_refs = speed.pool_noise([("reference runs", [0.0, 0.0024])])
    assert only_refs.sigma_pair == pytest.approx(0.0024) and only_refs.dof == 1
    assert only_refs.sigma_ucb == pytest.approx(0.0024 * math.sqrt(1 / 0.01579))
    more = speed.pool_noise([("reference runs", [0.0, 0.0024]), ("candidate repeats", [0.0, 0.0056]),
                             ("candidate repeats", [0.0, 0.010])])
    assert more.dof == 3 and more.n_runs == 6 and dict(more.sources) == {"reference runs": 2, "candidate repeats": 4}
    assert more.sigma_pair == pytest.approx(math.sqrt((0.0024 ** 2 + 0.0056 ** 2 + 0.010 ** 2) / 3))
    assert more.margin == pytest.approx(math.expm1(2 * more.sigma_bound))
    # one run of a configuration counts as a run, not as a degree of freedom
    assert speed.pool_noise([("reference runs", [0.0, 0.001]), ("candidate repeats", [0.3])]).dof == 1
    with pytest.raises(speed.SpeedError, match="needs two runs"):
        speed.pool_noise([("reference runs", [0.0])])


def test_h200_two_references_no_longer_give_a_margin_under_half_a_percent() -> None:
    """On one H200 two eager reference runs gave sigma_pair 0.09% and 0.24%: margins 0.17% / 0.49% before."""
    for diff in (0.0009, 0.0024):
        b = speed.pool_noise([("reference runs", [0.0, diff])])
        assert math.expm1(2 * b.sigma_pair) < 0.005  # what the old margin was
        assert b.margin > 0.005 and b.sigma_bound >= speed.MIN_SIGMA_PAIR
        gain = speed.paired_speedup([(1.005, 1.0)] * 3)
        assert gain is not None and not speed.clears(gain, b.margin)


def test_paired_speedup_and_the_gate() -> None:
    ps = speed.paired_speedup([(1.0, 0.5), (2.0, 2.1), (math.nan, 1.0), (1.0, 0.0)])
    assert ps is not None and ps.n_pairs == 2
    assert ps.speedup == pytest.approx(math.exp((math.log(2) + math.log(2 / 2.1)) / 2))
    lo, hi = ps.interval(0.01)
    assert lo < ps.speedup < hi and hi / lo == pytest.approx(math.exp(4 * 0.01 / math.sqrt(2)))
    assert speed.paired_speedup([(0.0, 1.0)]) is None
    margin = ps.speedup - 1
    assert not speed.clears(ps, margin + 1e-9) and speed.clears(ps, margin - 1e-9)


def test_speed_reproduces_is_the_gate() -> None:
    """L5 and the promotion call the same function: on evidence where a ratio of means (the old L5) and the
    geometric mean of ratios (the old promotion) disagree, the new L5 follows the paired statistic."""
    ref, cand = [1.0, 2.0], [0.5, 2.1]
    margin = 0.2
    old_gate = sum(ref) / sum(cand) - 1 > margin  # 1.154: fail
    old_promotion = math.exp(sum(math.log(r / c) for r, c in zip(ref, cand)) / 2) - 1 > margin  # 1.38: pass
    assert old_gate != old_promotion
    item = speed_reproduces(ref, cand, margin)
    ps = speed.paired_speedup(zip(ref, cand))
    assert ps is not None and item.status == ("pass" if speed.clears(ps, margin) else "fail") == "pass"
    assert speed_reproduces(ref, cand[:1], margin).status == "unchecked"
    assert speed_reproduces([], [], margin).status == "unchecked"
