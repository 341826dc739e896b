"""Integer arithmetic the project generates itself, with known answers and graded difficulty.

``arithmetic_items(n, seed)`` is the original mixed set (two-digit operands, ``+ - ×`` and
parentheses). ``arithmetic_items(n, seed, levels=(1, 2))`` draws from graded levels instead, so a
small model can have real but incomplete skill (DESIGN §11):

======  =====================================================  =========================
level   templates                                              operands
======  =====================================================  =========================
1       ``a + b``                                              one-digit (2–9)
2       ``a + b``, ``a - b``                                   two-digit a (10–99), one-digit b
3       ``a + b``, ``a - b``, ``a × b``                        two-digit ±, one-digit ×
4       ``a × b``, ``a + b - c``, ``a + b × c``                two-digit a, one-digit b, c
5       the original mixed set                                 a, b 2–99, c 2–12
======  =====================================================  =========================

Every item reads ``Compute $EXPR$.`` and has an integer answer. Deterministic in ``(n, seed, levels)``;
with ``levels`` the problems are distinct (no expression twice), so a held-out split never shares a
problem with training, and the levels get equal shares.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from jaxdebate.data.items import Item
from jaxdebate.errors import DataError

Template = tuple[str, Callable[[int, int, int], int]]

_MIXED: tuple[Template, ...] = (
    ("{a} + {b}", lambda a, b, c: a + b),
    ("{a} - {b}", lambda a, b, c: a - b),
    ("{a} \\times {b}", lambda a, b, c: a * b),
    ("{a} \\times {b} + {c}", lambda a, b, c: a * b + c),
    ("({a} + {b}) \\times {c}", lambda a, b, c: (a + b) * c),
    ("{a} - {b} \\times {c}", lambda a, b, c: a - b * c),
)


def _draw_mixed(rng: random.Random) -> tuple[str, int]:
    template, fn = _MIXED[rng.randrange(len(_MIXED))]
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    return template.format(a=a, b=b, c=c), fn(a, b, c)


def _draw_level(level: int, rng: random.Random) -> tuple[str, int]:
    one = lambda: rng.randint(2, 9)  # noqa: E731
    two = lambda: rng.randint(10, 99)  # noqa: E731
    if level == 1:
        a, b = one(), one()
        return f"{a} + {b}", a + b
    if level == 2:
        a, b = two(), one()
        return (f"{a} + {b}", a + b) if rng.random() < 0.5 else (f"{a} - {b}", a - b)
    if level == 3:
        kind = rng.randrange(3)
        if kind == 2:
            a, b = one(), one()
            return f"{a} \\times {b}", a * b
        a, b = two(), two()
        a, b = max(a, b), min(a, b)
        return (f"{a} + {b}", a + b) if kind == 0 else (f"{a} - {b}", a - b)
    if level == 4:
        kind = rng.randrange(3)
        a, b, c = two(), one(), one()
        if kind == 0:
            return f"{a} \\times {b}", a * b
        if kind == 1:
            return f"{a} + {b} - {c}", a + b - c
        return f"{a} + {b} \\times {c}", a + b * c
    return _draw_mixed(rng)


LEVELS = (1, 2, 3, 4, 5)


def level_size(level: int) -> int:
    """How many distinct problems ``level`` has (a bound on ``n`` for a single level)."""
    return {1: 8 * 8, 2: 90 * 8 * 2, 3: 8 * 8 + 4095 * 2, 4: 90 * 8 + 90 * 64 * 2, 5: 10**6}[level]


def arithmetic_items(n: int = 64, seed: int = 0, env: str = "math", levels: Sequence[int] | None = None) -> list[Item]:
    """``n`` problems such as ``Compute $(12 + 7) \\times 3$.`` with their integer answers.

    ``levels=None``: the original mixed set (ids ``arithmetic/<seed>/<i>``, repeats possible).
    ``levels=(1, 3)``: equal shares of distinct problems from each level, shuffled (ids
    ``arithmetic/L<level>/<seed>/<i>``, ``meta['level']``); a level with too few distinct problems
    for its share is a DataError, never a silently skewed mix.
    """
    rng = random.Random(seed)
    if levels is None:
        items = []
        for i in range(n):
            expression, answer = _draw_mixed(rng)
            items.append(Item(id=f"arithmetic/{seed}/{i:04d}", problem=f"Compute ${expression}$.",
                              answer=str(answer), env=env, meta={"expression": expression, "seed": seed}))
        return items
    levels = tuple(levels)
    if not levels or len(set(levels)) != len(levels) or any(level not in LEVELS for level in levels):
        raise DataError(f"arithmetic levels must be distinct values from {LEVELS}, got {levels}")
    # equal shares per level (the first n % len(levels) levels take one more), distinct problems
    drawn: list[tuple[int, str, int]] = []
    for k, level in enumerate(levels):
        quota = n // len(levels) + (k < n % len(levels))
        if quota > level_size(level):
            raise DataError(
                f"arithmetic level {level} has {level_size(level)} distinct problems, fewer than the "
                f"{quota} that n={n} over levels {levels} takes from it (ask for fewer items)"
            )
        seen: set[str] = set()
        while len(seen) < quota:
            expression, answer = _draw_level(level, rng)
            if expression not in seen:
                seen.add(expression)
                drawn.append((level, expression, answer))
    rng.shuffle(drawn)
    return [
        Item(id=f"arithmetic/L{level}/{seed}/{i:04d}", problem=f"Compute ${expression}$.", answer=str(answer),
             env=env, meta={"expression": expression, "seed": seed, "level": level})
        for i, (level, expression, answer) in enumerate(drawn)
    ]
