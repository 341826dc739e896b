"""The learning-rate schedule both learners use (schedules.warmup_then_decay), against its formula:
warm-up update k at peak (k + 1) / (w + 1), then constant, linear or cosine from peak to end."""

from __future__ import annotations

import math

import pytest

from jaxdebate.schedules import warmup_then_decay

PEAK, END, W, T = 2.0, 0.5, 3, 11


def expected(kind: str, step: int, warmup: int = W) -> float:
    if step < warmup:
        return PEAK * (step + 1) / (warmup + 1)
    frac = min(step - warmup, T - warmup) / (T - warmup)
    if kind == "constant":
        return PEAK
    if kind == "linear":
        return PEAK + (END - PEAK) * frac
    return END + (PEAK - END) * 0.5 * (1 + math.cos(math.pi * frac))


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, W])
def test_every_step_follows_the_formula_and_decay_ends_at_end_lr(kind, warmup):
    schedule = warmup_then_decay(PEAK, END, warmup, T, kind)
    got = [float(schedule(step)) for step in range(T + 2)]
    assert got == pytest.approx([expected(kind, step, warmup) for step in range(T + 2)], rel=1e-6)
    assert got[warmup] == pytest.approx(PEAK, rel=1e-6)
    if kind != "constant":
        assert got[T] == pytest.approx(END, rel=1e-6) and got[T + 1] == pytest.approx(END, rel=1e-6)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown schedule 'step'"):
        warmup_then_decay(PEAK, END, W, T, "step")
