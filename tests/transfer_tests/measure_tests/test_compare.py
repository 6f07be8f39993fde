"""``tunedb.transfer.measure.compare``: interleaved rounds, a paired t-interval of the ratio at
each look (Bonferroni over the looks), verdicts only when the interval says so."""

from __future__ import annotations

import math
import random

import pytest

from tunedb.transfer.measure.compare import LEVEL, compare, interleaved, ratio_interval


def _rounds(ratios: list[float], base: float = 1e-3):
    """A round function whose A/B ratio in round r is ratios[r % len(ratios)]."""
    def round_fn(r: int) -> tuple[float, float]:
        return base * ratios[r % len(ratios)], base
    return round_fn


def test_a_clear_difference_is_decided_at_the_first_look():
    c = compare(_rounds([0.80, 0.81, 0.79]), question="sign", looks=(3, 5, 8, 12))
    assert c.verdict == "faster" and c.rounds == 3 and c.hi < 1 and c.lo <= c.ratio <= c.hi
    c = compare(_rounds([1.20, 1.21, 1.19]), question="within", margin=0.05, looks=(3, 5, 8, 12))
    assert c.verdict == "fails" and c.rounds == 3 and c.lo > 1.05
    c = compare(_rounds([0.97, 0.98, 0.96]), question="within", margin=0.05, looks=(3, 5, 8, 12))
    assert c.verdict == "holds" and c.hi <= 1.05 and "A is" in c.percent_text() and "faster" in c.percent_text()


def test_equal_sides_are_equivalent_not_a_win():
    c = compare(_rounds([1.0, 1.005, 0.995]), question="sign", margin=0.05)
    assert c.verdict == "equivalent" and c.lo >= 1 / 1.05 and c.hi <= 1.05


def test_noise_too_large_is_inconclusive_with_the_noise_as_reason():
    c = compare(_rounds([0.7, 1.5, 0.8, 1.4]), question="within", margin=0.05, looks=(3, 5, 8, 12))
    assert c.verdict == "inconclusive" and c.rounds == 12 and not c.decided
    assert "noise" in c.reason and f"{c.noise_cv * 100:.1f} %" in c.reason


def test_failed_rounds_are_left_out_and_named_as_the_reason():
    c = compare(lambda r: (None, 1e-3), question="sign", looks=(3,))
    assert c.verdict == "inconclusive" and c.ratio is None and c.reason == "only 0 of 3 rounds measured both sides"


def test_the_interval_is_bonferroni_corrected_over_the_looks():
    ratios = [0.9, 1.3, 1.0, 1.1, 0.95]
    c = compare(_rounds(ratios), question="sign", looks=(3, 5))
    a, b = c.a, c.b
    r, lo, hi, _ = ratio_interval(a, b, 1 - (1 - LEVEL) / 2)
    assert (c.ratio, c.lo, c.hi) == pytest.approx((r, lo, hi))
    assert c.ratio == pytest.approx(math.exp(sum(math.log(x) for x in ratios) / 5))


def test_interleaving_alternates_which_side_goes_first():
    order: list[str] = []

    def side(name: str):
        def m() -> float:
            order.append(name)
            return 1e-3
        return m
    fn = interleaved(side("A"), side("B"))
    for r in range(4):
        fn(r)
    assert order == ["A", "B", "B", "A", "A", "B", "B", "A"]


def test_false_wins_stay_below_the_level_under_pure_noise():
    """A and B the same (true ratio 1), 20 % lognormal noise on each measurement: across 400
    comparisons a "faster" or "slower" verdict comes out at most ~5 % of the time."""
    false = 0
    sigma = math.sqrt(math.log(1 + 0.2 ** 2))
    for seed in range(400):
        rng = random.Random(seed)

        def fn(r: int, rng: random.Random = rng) -> tuple[float, float]:
            return 1e-3 * rng.lognormvariate(0, sigma), 1e-3 * rng.lognormvariate(0, sigma)
        false += compare(fn, question="sign").verdict in ("faster", "slower")
    assert false / 400 <= 0.07, false  # (5 % is the design level; 7 % leaves room for 400 draws)


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        compare(_rounds([1.0]), question="bigger")
    with pytest.raises(ValueError):
        compare(_rounds([1.0]), margin=-0.1)
    with pytest.raises(ValueError):
        compare(_rounds([1.0]), looks=(1,))
