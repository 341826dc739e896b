"""Small-sample statistics for accuracies: Wilson intervals, two-proportion and McNemar tests, t
intervals and paired t tests over seeds, Holm's adjustment, a strategy x seed blocked ANOVA, seeds
needed for a given power, an equivalence (TOST) test and a permutation ANOVA across strategies.

Pure functions of numbers (standard library only: the t and F tails come from the regularized
incomplete beta function below), so results tables, the eval command and tests share one
implementation. Every spread is a sample standard deviation (ddof=1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

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


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (the CDF of Beta(a, b) at ``x``): its
    continued fraction (DLMF 8.17.22) evaluated by the modified Lentz method, on the side of the
    symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a) - (
        math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    # 1 / (1 + d_1 / (1 + d_2 / (1 + ...))): numerators 1, d_1, d_2, ..., every denominator 1
    tiny = 1e-300
    f = c = tiny
    d = 0.0
    for i in range(1, 2000):
        j = i - 1
        if j == 0:
            numerator = 1.0
        elif j % 2:  # d_{2m+1}
            m = (j - 1) // 2
            numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:  # d_{2m}
            m = j // 2
            numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of Student's t statistic with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"need df > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return _regularized_beta(df / (df + t * t), df / 2, 0.5)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    half_tail = t_two_sided_p(t, df) / 2
    return 1.0 - half_tail if t > 0 else half_tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_cdf`, to about 1e-12)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"need 0 < q < 1, got {q}")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < q:
        low, high = high, 2 * high
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < q:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def f_upper_p(f: float, df1: float, df2: float) -> float:
    """P(F >= f) for the F distribution with (``df1``, ``df2``) degrees of freedom."""
    if df1 <= 0 or df2 <= 0:
        raise ValueError(f"need positive degrees of freedom, got {df1}, {df2}")
    if f <= 0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _regularized_beta(df2 / (df2 + df1 * f), df2 / 2, df1 / 2)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and SD (ddof=1); values equal up to rounding have SD 0: ``174/300 - 170/300`` and
    ``188/300 - 184/300`` are one difference of 4 items, yet differ in the last bit, and a 1e-16
    spread would make t astronomically large instead of undefined."""
    n = len(values)
    mean = sum(values) / n
    if max(abs(v - mean) for v in values) <= 1e-12 * max(1.0, abs(mean)):
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The t interval (95% by default) of the mean of ``values``; None for fewer than two."""
    n = len(values)
    if n < 2:
        return None
    mean, sd = _mean_sd(values)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def one_sample_t(values: Sequence[float]) -> dict[str, Any]:
    """The t test of mean(``values``) = 0 with its 95% interval: ``n``, ``mean``, ``sd`` (ddof=1),
    ``ci95``, ``t``, ``df``, two-sided ``p``. Needs two values. With no spread the test is undefined
    unless every value is 0: t is then infinite and ``p`` None (not 0: equal non-zero values carry no
    variance estimate, so no claim may rest on them); all zeros give t 0 and p 1."""
    n = len(values)
    if n < 2:
        raise ValueError(f"need at least two values, got {n}")
    values = [float(v) for v in values]
    mean, sd = _mean_sd(values)
    se = sd / math.sqrt(n)
    if se == 0:
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    else:
        t = mean / se
    return {"n": n, "mean": mean, "sd": sd, "ci95": list(t_interval(values)), "t": t, "df": n - 1,
            "p": None if math.isinf(t) else t_two_sided_p(t, n - 1)}


def paired_t(first: Sequence[float], second: Sequence[float]) -> dict[str, Any]:
    """Paired t test of ``second - first`` over aligned pairs (seeds: the same seed fixes data order
    and sampling for both arms, so the pair, not the run, is the unit): :func:`one_sample_t` of the
    differences."""
    if len(first) != len(second):
        raise ValueError(f"paired samples differ in length: {len(first)} vs {len(second)}")
    return one_sample_t([b - a for a, b in zip(first, second)])


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error rate
    without assuming independence), in the input order. A p-value that is not a finite number in
    [0, 1] is an error: it would sort first and make every adjusted p 1."""
    bad = [p for p in pvalues if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0)]
    if bad:
        raise ValueError(f"Holm needs p-values in [0, 1], got {bad[0]!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def holm_entries(entries: Sequence[dict[str, Any]], *, fixed_family: bool = False) -> None:
    """Holm-adjust a family of result records in place: each entry's ``p`` becomes ``p_holm``; an
    entry without a finite ``p`` (untested) gets ``p_holm`` None. It is left out of the family, unless
    ``fixed_family`` (a pre-registered family keeps its size whatever was testable): then it counts as
    p = 1, so it is never rejected and the others are adjusted over every entry."""
    tested = [e for e in entries if e.get("p") is not None and math.isfinite(e["p"])]
    untested = len(entries) - len(tested) if fixed_family else 0
    for e, adjusted in zip(tested, holm([e["p"] for e in tested] + [1.0] * untested)):
        e["p_holm"] = adjusted
    for e in entries:
        e.setdefault("p_holm", None)


def blocked_anova(table: Mapping[str, Mapping[Hashable, float]]) -> dict[str, Any]:
    """Two-way ANOVA without replication of a strategy x seed table (``table[strategy][seed]``):
    the seed is a block (it fixes data order and sampling for every strategy), so its variation is
    taken out of the error before strategies are compared. Seeds missing any strategy's cell are
    dropped (``seeds_dropped``); needs two strategies and two complete seeds.

    Returns the F statistics and p-values of strategy and seed (p None without residual variance: an
    additive table has nothing to test against), their degrees of freedom, the sums of
    squares and the seeds used."""
    arms = list(table)
    seeds = list(dict.fromkeys(k for arm in arms for k in table[arm]))
    used = [k for k in seeds if all(k in table[arm] and table[arm][k] is not None for arm in arms)]
    dropped = [k for k in seeds if k not in used]
    a, b = len(arms), len(used)
    if a < 2 or b < 2:
        raise ValueError(f"need >= 2 strategies and >= 2 complete seeds, got {a} and {b}")
    cells = [[float(table[arm][k]) for k in used] for arm in arms]
    grand = sum(map(sum, cells)) / (a * b)
    arm_means = [sum(row) / b for row in cells]
    seed_means = [sum(cells[i][j] for i in range(a)) / a for j in range(b)]
    ss_total = sum((v - grand) ** 2 for row in cells for v in row)
    ss_strategy = b * sum((m - grand) ** 2 for m in arm_means)
    ss_seed = a * sum((m - grand) ** 2 for m in seed_means)
    ss_residual = ss_total - ss_strategy - ss_seed
    if ss_residual <= 1e-12 * ss_total:  # an additive table: what is left is rounding
        ss_residual = 0.0
    df_strategy, df_seed, df_residual = a - 1, b - 1, (a - 1) * (b - 1)
    ms_residual = ss_residual / df_residual

    def f_and_p(ss: float, df: int) -> tuple[float, float | None]:
        if ms_residual == 0:  # no residual variance to test against: F undefined or infinite, no p
            return (math.nan, None) if ss == 0 else (math.inf, None)
        f = ss / df / ms_residual
        return f, f_upper_p(f, df, df_residual)

    strategy_f, strategy_p = f_and_p(ss_strategy, df_strategy)
    seed_f, seed_p = f_and_p(ss_seed, df_seed)
    return {"strategies": arms, "seeds_used": used, "seeds_dropped": dropped,
            "strategy_F": strategy_f, "strategy_p": strategy_p, "strategy_df": df_strategy,
            "seed_F": seed_f, "seed_p": seed_p, "seed_df": df_seed, "residual_df": df_residual,
            "ss": {"strategy": ss_strategy, "seed": ss_seed, "residual": ss_residual, "total": ss_total},
            "residual_sd": math.sqrt(ms_residual)}


def paired_mcnemar(first: Sequence[bool] | Mapping[Hashable, bool],
                   second: Sequence[bool] | Mapping[Hashable, bool]) -> dict[str, Any]:
    """McNemar's exact test on per-item correctness of the same items under two conditions (two
    aligned sequences, or two ``id -> correct`` mappings paired on their common ids): ``n``,
    ``first_acc``, ``second_acc``, ``only_first``, ``only_second``, ``p``."""
    if isinstance(first, Mapping) != isinstance(second, Mapping):
        raise TypeError("pass two sequences or two mappings")
    if isinstance(first, Mapping):
        ids = [i for i in first if i in second]
        pairs = [(bool(first[i]), bool(second[i])) for i in ids]
    else:
        if len(first) != len(second):
            raise ValueError(f"paired samples differ in length: {len(first)} vs {len(second)}")
        pairs = [(bool(x), bool(y)) for x, y in zip(first, second)]
    n = len(pairs)
    only_first = sum(1 for x, y in pairs if x and not y)
    only_second = sum(1 for x, y in pairs if y and not x)
    return {"n": n, "first_acc": sum(x for x, _ in pairs) / n if n else None,
            "second_acc": sum(y for _, y in pairs) / n if n else None,
            "only_first": only_first, "only_second": only_second, "p": mcnemar_test(only_first, only_second)}


def seeds_needed(sd: float, difference: float, *, power: float = 0.8, alpha: float = 0.05,
                 max_seeds: int = 100_000) -> int | None:
    """Seeds (pairs) a two-sided paired t test at ``alpha`` needs to detect a mean difference
    ``difference`` with ``power``, given the SD of the paired differences: the smallest n >= 2 with
    n >= ((t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / difference)^2 (the normal-approximation
    formula with t quantiles at the df it implies). None when more than ``max_seeds`` are needed."""
    if sd < 0 or difference == 0:
        raise ValueError(f"need sd >= 0 and a non-zero difference, got {sd}, {difference}")
    ratio = sd / abs(difference)
    z = (_normal_quantile(1 - alpha / 2) + _normal_quantile(power)) * ratio
    n = max(2, math.ceil(z * z))  # the t-based n is at least the normal one
    while n <= max_seeds:
        df = n - 1
        need = ((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * ratio) ** 2
        if n >= need:
            return n
        n += 1
    return None


def blocks_for_halfwidth(sd: float, halfwidth: float, *, level: float = 0.95, minimum: int = 2,
                         max_blocks: int = 100_000) -> int | None:
    """Blocks (seeds) for a paired ``level`` t interval of half-width <= ``halfwidth``, given the SD of
    the paired differences: the smallest n >= ``minimum`` with t_{(1+level)/2, n-1} * sd / sqrt(n) <=
    halfwidth (None when more than ``max_blocks``). The expected width, not a guarantee: the realised
    SD varies around ``sd``."""
    if sd < 0 or halfwidth <= 0 or not 0 < level < 1:
        raise ValueError(f"need sd >= 0, halfwidth > 0 and 0 < level < 1, got {sd}, {halfwidth}, {level}")
    n = max(2, minimum)
    while n <= max_blocks:
        if t_quantile((1 + level) / 2, n - 1) * sd / math.sqrt(n) <= halfwidth:
            return n
        n += 1
    return None


def _normal_quantile(q: float) -> float:
    low, high = -40.0, 40.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if 0.5 * math.erfc(-mid / math.sqrt(2)) < q else (low, mid)
    return (low + high) / 2


def equivalence_test(differences: Sequence[float], margin: float, alpha: float = 0.05) -> dict[str, Any]:
    """Two one-sided t tests (TOST) that the mean difference lies inside (-margin, +margin): ``p``
    is the larger one-sided p-value, and ``equivalent`` (p < alpha) holds exactly when the
    (1 - 2 alpha) interval, ``ci``, lies inside the margin. Not significant and not equivalent means
    inconclusive at this power. With no spread there is no variance estimate: ``p`` None, not
    equivalent."""
    if margin <= 0:
        raise ValueError(f"need margin > 0, got {margin}")
    n = len(differences)
    if n < 2:
        raise ValueError(f"need at least two differences, got {n}")
    mean, sd = _mean_sd([float(v) for v in differences])
    se, df = sd / math.sqrt(n), n - 1
    p = None if se == 0 else max(1 - t_cdf((mean + margin) / se, df), t_cdf((mean - margin) / se, df))
    half = t_quantile(1 - alpha, df) * se
    return {"margin": margin, "ci": [mean - half, mean + half], "level": 1 - 2 * alpha, "p": p,
            "equivalent": p is not None and p < alpha}


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
