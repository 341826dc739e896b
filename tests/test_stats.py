"""Wilson intervals, the two-proportion test and McNemar's test against values computed by hand and
by scipy where it is installed."""

import math

import pytest

from jaxdebate.stats import mcnemar_test, two_proportion_test, wilson_interval


def test_wilson_interval_known_values():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.27753, abs=1e-5)
    low, high = wilson_interval(5, 10)
    assert (low, high) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(0.72247, abs=1e-5)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_two_proportion_test():
    z, p = two_proportion_test(90, 300, 120, 300)
    pooled = 210 / 600
    assert z == pytest.approx(0.1 / math.sqrt(pooled * (1 - pooled) * 2 / 300))
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert 0.005 < p < 0.02
    assert two_proportion_test(5, 10, 5, 10) == (0.0, 1.0)
    z, _ = two_proportion_test(8, 10, 2, 10)
    assert z < 0


def test_mcnemar_exact():
    assert mcnemar_test(0, 0) == 1.0
    assert mcnemar_test(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_test(3, 3) == 1.0
    assert mcnemar_test(10, 2) == mcnemar_test(2, 10)
    scipy_stats = pytest.importorskip("scipy.stats")
    assert mcnemar_test(4, 15) == pytest.approx(scipy_stats.binomtest(4, 19, 0.5).pvalue)


def test_t_interval_known_values():
    from jaxdebate.stats import t_interval

    assert t_interval([0.5]) is None
    low, high = t_interval([0.40, 0.45, 0.50])  # mean 0.45, sd 0.05, t(2) = 4.303
    assert low == pytest.approx(0.45 - 4.303 * 0.05 / math.sqrt(3)) and high == pytest.approx(0.45 + 4.303 * 0.05 / math.sqrt(3))
    low, high = t_interval([0.1] * 50)  # beyond the table: no spread, no width
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)


def test_permutation_anova_against_scipy_and_by_construction():
    from jaxdebate.stats import permutation_anova

    groups = [[0.47, 0.41, 0.43], [0.32, 0.35, 0.30], [0.41, 0.38, 0.44], [0.33, 0.36, 0.35], [0.40, 0.37, 0.39]]
    f, p = permutation_anova(groups, permutations=20000, seed=1)
    assert permutation_anova(groups, permutations=20000, seed=1) == (f, p)  # seeded
    same = [[0.4, 0.5, 0.45]] * 4
    assert permutation_anova(same, permutations=2000)[1] > 0.5  # identical groups: nothing to find
    apart = [[0.1, 0.11, 0.12], [0.9, 0.91, 0.92]]
    assert permutation_anova(apart, permutations=2000)[1] <= 0.2  # only 20 distinct splits of 6 values
    with pytest.raises(ValueError):
        permutation_anova([[0.1, 0.2]])
    with pytest.raises(ValueError):
        permutation_anova([[0.1], [0.2]])
    scipy_stats = pytest.importorskip("scipy.stats")
    reference = scipy_stats.f_oneway(*groups)
    assert f == pytest.approx(reference.statistic)
    assert abs(p - reference.pvalue) < 0.03  # permutation and F-distribution p agree on such data
