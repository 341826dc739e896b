"""Learning-rate schedules shared by the GRPO learner and the DPO trainer."""

from __future__ import annotations

import optax


def warmup_then_decay(peak: float, end: float, warmup_steps: int, total_steps: int, kind: str) -> optax.Schedule:
    """Linear warm-up to ``peak`` over ``warmup_steps``, then ``kind`` (``constant``, ``linear`` or
    ``cosine``) from ``peak`` to ``end`` over the remaining updates. Warm-up update k (0-based) uses
    ``peak * (k + 1) / (warmup_steps + 1)``: the first update already moves the weights (a warm-up
    from 0 wastes it, which over a 12-step CPU run is a twelfth of the run)."""
    decay_steps = max(1, total_steps - warmup_steps)
    if kind == "cosine":
        decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=end / peak if peak > 0 else 0.0)
    elif kind == "linear":
        decay = optax.linear_schedule(peak, end, decay_steps)
    elif kind == "constant":
        decay = optax.constant_schedule(peak)
    else:
        raise ValueError(f"unknown schedule {kind!r}: expected constant, linear or cosine")
    if warmup_steps == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(peak / (warmup_steps + 1), peak, warmup_steps), decay], [warmup_steps])
