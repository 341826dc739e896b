"""A tiny task set the project generates itself: integer arithmetic with known answers.

Used by tests and smoke configs, so nothing needs a download. Deterministic in ``(n, seed)``.
"""

from __future__ import annotations

import random

from jaxdebate.data.items import Item

_TEMPLATES = (
    ("{a} + {b}", lambda a, b, c: a + b),
    ("{a} - {b}", lambda a, b, c: a - b),
    ("{a} \\times {b}", lambda a, b, c: a * b),
    ("{a} \\times {b} + {c}", lambda a, b, c: a * b + c),
    ("({a} + {b}) \\times {c}", lambda a, b, c: (a + b) * c),
    ("{a} - {b} \\times {c}", lambda a, b, c: a - b * c),
)


def arithmetic_items(n: int = 64, seed: int = 0, env: str = "math") -> list[Item]:
    """``n`` problems such as ``Compute $(12 + 7) \\times 3$.`` with their integer answers."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        template, fn = _TEMPLATES[rng.randrange(len(_TEMPLATES))]
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
        expression = template.format(a=a, b=b, c=c)
        items.append(
            Item(
                id=f"arithmetic/{seed}/{i:04d}",
                problem=f"Compute ${expression}$.",
                answer=str(fn(a, b, c)),
                env=env,
                meta={"expression": expression, "seed": seed},
            )
        )
    return items
