"""Small-sample statistics for accuracies: Wilson intervals, two-proportion and McNemar tests.

Pure functions of counts (standard library only), so results tables, the eval command and tests
share one implementation.
"""

from __future__ import annotations

import math

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
