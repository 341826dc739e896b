"""Small-sample statistics for accuracies: Wilson intervals, two-proportion and McNemar tests, t
intervals over seeds and a permutation ANOVA across strategies.

Pure functions of counts (standard library only), so results tables, the eval command and tests
share one implementation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal


def _check_counts(successes: int, n: int) -> None:
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (0, 1) when ``n == 0``."""
    _check_counts(successes, n)
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2))


def two_proportion_test(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """(z, two-sided p) of the pooled two-proportion z-test of ``k2/n2`` against ``k1/n1``."""
    _check_counts(k1, n1)
    _check_counts(k2, n2)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one trial")
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0, 1.0
    z = (k2 / n2 - k1 / n1) / se
    return z, normal_two_sided_p(z)


def mcnemar_test(only_first: int, only_second: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (items only one side got right)."""
    if only_first < 0 or only_second < 0:
        raise ValueError("discordant counts must be >= 0")
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


#: The 97.5% quantile of Student's t by degrees of freedom (for 95% intervals over a few seeds).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95% t interval of the mean of ``values`` (None for fewer than two); beyond the tabled
    degrees of freedom the nearest smaller one is used (slightly wider, never narrower)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = T975[max(d for d in T975 if d <= n - 1)]
    half = t * sd / math.sqrt(n)
    return mean - half, mean + half


def _between_groups_f(groups: Sequence[Sequence[float]]) -> float:
    values = [v for g in groups for v in g]
    grand = sum(values) / len(values)
    between = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups) / (len(groups) - 1)
    within = sum((v - sum(g) / len(g)) ** 2 for g in groups for v in g) / (len(values) - len(groups))
    return math.inf if within == 0 else between / within


def permutation_anova(groups: Sequence[Sequence[float]], *, permutations: int = 20000,
                      seed: int = 0) -> tuple[float, float]:
    """(F, p): one-way ANOVA's F statistic and its permutation p-value (the share of random
    relabellings of the values with an F at least as large; no normality assumed). Needs at least
    two groups, each non-empty, and more values than groups."""
    groups = [list(map(float, g)) for g in groups]
    if len(groups) < 2 or any(not g for g in groups) or sum(map(len, groups)) <= len(groups):
        raise ValueError("need >= 2 non-empty groups and more values than groups")
    observed = _between_groups_f(groups)
    values = [v for g in groups for v in g]
    sizes = [len(g) for g in groups]
    rng = random.Random(seed)
    hits = 0
    for _ in range(permutations):
        rng.shuffle(values)
        shuffled, start = [], 0
        for size in sizes:
            shuffled.append(values[start:start + size])
            start += size
        hits += _between_groups_f(shuffled) >= observed - 1e-12
    return observed, (hits + 1) / (permutations + 1)
