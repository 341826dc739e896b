"""Reference statistics for the tests, written from their textbook definitions (numpy, scipy)."""

from __future__ import annotations

import numpy as np


def two_way_anova(table: dict[str, list[float]]) -> dict[str, float]:
    """The strategy x seed ANOVA without replication, from its textbook sums of squares (numpy) and
    the F distribution's tail (scipy): the reference blocked_anova is held to."""
    from scipy import stats as sps

    y = np.asarray(list(table.values()), dtype=np.float64)  # [strategies, seeds]
    a, b = y.shape
    grand = y.mean()
    ss = {"strategy": b * np.sum((y.mean(axis=1) - grand) ** 2), "seed": a * np.sum((y.mean(axis=0) - grand) ** 2),
          "total": np.sum((y - grand) ** 2)}
    ss["residual"] = ss["total"] - ss["strategy"] - ss["seed"]
    df = {"strategy": a - 1, "seed": b - 1, "residual": (a - 1) * (b - 1)}
    mse = ss["residual"] / df["residual"]
    out = {"seed_share": ss["seed"] / ss["total"]}
    for name in ("strategy", "seed"):
        out[f"{name}_F"] = ss[name] / df[name] / mse
        out[f"{name}_p"] = float(sps.f.sf(out[f"{name}_F"], df[name], df["residual"]))
    return out
