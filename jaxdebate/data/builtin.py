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

``arithmetic_items(n, seed, templates=("2+1", "1x1"))`` draws from single templates of levels 1–4
instead, so a training pool can keep only the templates a model solves sometimes but not always.
A name gives the digits of each operand and the operators (``x`` is ×):

========  ================================  =====  =================
template  expression                        level  distinct problems
========  ================================  =====  =================
``1+1``   ``a + b``, a and b 2–9            1      64
``2+1``   ``a + b``, a 10–99, b 2–9         2      720
``2-1``   ``a - b``, a 10–99, b 2–9         2      720
``2+2``   ``a + b``, a ≥ b, both 10–99      3      4095
``2-2``   ``a - b``, a ≥ b, both 10–99      3      4095
``1x1``   ``a × b``, a and b 2–9            3      64
``2x1``   ``a × b``, a 10–99, b 2–9         4      720
``2+1-1`` ``a + b - c``, a 10–99, b, c 2–9  4      5760
``2+1x1`` ``a + b × c``, a 10–99, b, c 2–9  4      5760
========  ================================  =====  =================

Same guarantees as ``levels``: distinct problems, equal shares per template, deterministic in
``(n, seed, templates)``. Level items carry their template in ``meta['template']`` too (levels 1–4),
so accuracy can be broken down by template either way.
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


def _one(rng: random.Random) -> int:
    return rng.randint(2, 9)


def _two(rng: random.Random) -> int:
    return rng.randint(10, 99)


def _ordered(rng: random.Random) -> tuple[int, int]:
    a, b = _two(rng), _two(rng)
    return max(a, b), min(a, b)


def _pair(draw_a, draw_b, symbol: str, fn):
    def draw(rng: random.Random) -> tuple[str, int]:
        a, b = draw_a(rng), draw_b(rng)
        return f"{a} {symbol} {b}", fn(a, b)
    return draw


def _draw_2p1m1(rng: random.Random) -> tuple[str, int]:
    a, b, c = _two(rng), _one(rng), _one(rng)
    return f"{a} + {b} - {c}", a + b - c


def _draw_2p1x1(rng: random.Random) -> tuple[str, int]:
    a, b, c = _two(rng), _one(rng), _one(rng)
    return f"{a} + {b} \\times {c}", a + b * c


def _draw_ordered(symbol: str, fn):
    def draw(rng: random.Random) -> tuple[str, int]:
        a, b = _ordered(rng)
        return f"{a} {symbol} {b}", fn(a, b)
    return draw


# name -> (level, draw, distinct problems); the draws match _draw_level's operands for that template
TEMPLATES: dict[str, tuple[int, Callable[[random.Random], tuple[str, int]], int]] = {
    "1+1": (1, _pair(_one, _one, "+", lambda a, b: a + b), 8 * 8),
    "2+1": (2, _pair(_two, _one, "+", lambda a, b: a + b), 90 * 8),
    "2-1": (2, _pair(_two, _one, "-", lambda a, b: a - b), 90 * 8),
    "2+2": (3, _draw_ordered("+", lambda a, b: a + b), 4095),
    "2-2": (3, _draw_ordered("-", lambda a, b: a - b), 4095),
    "1x1": (3, _pair(_one, _one, "\\times", lambda a, b: a * b), 8 * 8),
    "2x1": (4, _pair(_two, _one, "\\times", lambda a, b: a * b), 90 * 8),
    "2+1-1": (4, _draw_2p1m1, 90 * 64),
    "2+1x1": (4, _draw_2p1x1, 90 * 64),
}


def template_of(level: int, expression: str) -> str | None:
    """The template name of a level-1..4 expression (None for level 5, whose mix spans templates)."""
    if level not in (1, 2, 3, 4):
        return None
    parts = expression.replace("\\times", "x").split()
    operands, operators = parts[0::2], parts[1::2]
    return "".join(str(len(x)) + (operators[k] if k < len(operators) else "") for k, x in enumerate(operands))


def level_size(level: int) -> int:
    """How many distinct problems ``level`` has (a bound on ``n`` for a single level)."""
    return {1: 8 * 8, 2: 90 * 8 * 2, 3: 8 * 8 + 4095 * 2, 4: 90 * 8 + 90 * 64 * 2, 5: 10**6}[level]


def arithmetic_items(n: int = 64, seed: int = 0, env: str = "math", levels: Sequence[int] | None = None,
                     templates: Sequence[str] | None = None) -> list[Item]:
    """``n`` problems such as ``Compute $(12 + 7) \\times 3$.`` with their integer answers.

    ``levels=None``: the original mixed set (ids ``arithmetic/<seed>/<i>``, repeats possible).
    ``levels=(1, 3)``: equal shares of distinct problems from each level, shuffled (ids
    ``arithmetic/L<level>/<seed>/<i>``, ``meta['level']``); a level with too few distinct problems
    for its share is a DataError, never a silently skewed mix.
    ``templates=("2+1", "1x1")`` (not with ``levels``): the same from single templates (ids
    ``arithmetic/T<template>/<seed>/<i>``, ``meta['template']`` and ``meta['level']``).
    """
    if templates is not None:
        if levels is not None:
            raise DataError("arithmetic: give levels or templates, not both")
        return _template_items(n, seed, env, tuple(templates))
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
    items = []
    for i, (level, expression, answer) in enumerate(drawn):
        meta = {"expression": expression, "seed": seed, "level": level}
        if (template := template_of(level, expression)) is not None:
            meta["template"] = template
        items.append(Item(id=f"arithmetic/L{level}/{seed}/{i:04d}", problem=f"Compute ${expression}$.",
                          answer=str(answer), env=env, meta=meta))
    return items


def _template_items(n: int, seed: int, env: str, templates: tuple[str, ...]) -> list[Item]:
    """Equal shares of distinct problems from each named template, shuffled (see the module doc)."""
    unknown = [t for t in templates if t not in TEMPLATES]
    if not templates or unknown or len(set(templates)) != len(templates):
        raise DataError(f"arithmetic templates must be distinct names from {', '.join(TEMPLATES)}, got "
                        f"{'/'.join(templates) or 'none'}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    rng = random.Random(seed)
    drawn: list[tuple[str, str, int]] = []
    for k, name in enumerate(templates):
        _, draw, size = TEMPLATES[name]
        quota = n // len(templates) + (k < n % len(templates))
        if quota > size:
            raise DataError(f"arithmetic template {name} has {size} distinct problems, fewer than the {quota} "
                            f"that n={n} over templates {'/'.join(templates)} takes from it (ask for fewer items)")
        seen: set[str] = set()
        while len(seen) < quota:
            expression, answer = draw(rng)
            if expression not in seen:
                seen.add(expression)
                drawn.append((name, expression, answer))
    rng.shuffle(drawn)
    return [
        Item(id=f"arithmetic/T{name}/{seed}/{i:04d}", problem=f"Compute ${expression}$.", answer=str(answer),
             env=env, meta={"expression": expression, "seed": seed, "level": TEMPLATES[name][0], "template": name})
        for i, (name, expression, answer) in enumerate(drawn)
    ]
