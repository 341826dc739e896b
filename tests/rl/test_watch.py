"""The loop's watch over steps (rl/watch.py): divergence stops only after ``nonfinite_patience``
non-finite updates in a row, a finite update resets the count, and a stretch of steps without an
update is said once, with its reason."""

from __future__ import annotations

import pytest

from jaxdebate.rl.watch import StepWatch, no_update_reason

# the loop's step metrics: the filters' train/* (step_metrics.py) beside the learner's
APPLIED = {"learner/updated": 1.0, "learner/loss": 0.5, "learner/grad_norm": 1.0, "train/n_kept": 6.0}
NONFINITE = {"learner/updated": 0.0, "learner/loss": float("nan"), "learner/grad_norm": float("inf"),
             "learner/nonfinite/loss": 1.0, "learner/nonfinite/grad_norm": 1.0, "train/n_kept": 6.0}
ZERO_SIGNAL = {"learner/updated": 0.0, "train/zero_advantage_fraction": 1.0, "train/n_kept": 0.0}


def _observe(watch: StepWatch, steps: list[dict], newest: int | None = None) -> list[list[str]]:
    return [watch.observe(i + 1, m, newest) for i, m in enumerate(steps)]


def test_a_finite_update_resets_the_count_so_scattered_divergence_never_stops_the_run():
    watch = StepWatch(nonfinite_patience=3, idle_after=0)
    lines = _observe(watch, [NONFINITE, NONFINITE, APPLIED, NONFINITE, NONFINITE, APPLIED])
    assert watch.stop is None and watch.nonfinite_run == 0
    assert [len(x) for x in lines] == [1, 1, 0, 1, 1, 0]  # each non-finite step is said, none stops
    assert lines[0][0].startswith("step 1: non-finite loss, grad_norm (loss=nan, grad_norm=inf)")


def test_patience_consecutive_non_finite_updates_stop_naming_step_metric_and_checkpoint():
    watch = StepWatch(nonfinite_patience=3, idle_after=0)
    _observe(watch, [APPLIED, NONFINITE, NONFINITE], newest=1)
    assert watch.stop is None and watch.nonfinite_run == 2
    watch.observe(4, NONFINITE, 1)
    message = str(watch.stop)
    assert message.startswith("step 4: non-finite loss, grad_norm in 3 consecutive update(s)")
    assert "checkpoint 1 is the newest" in message and "optimizer.peak_lr" in message
    fresh = StepWatch(nonfinite_patience=1, idle_after=0)
    fresh.observe(1, NONFINITE, None)
    assert "no checkpoint was written" in str(fresh.stop)


@pytest.mark.parametrize("metrics, reason", [
    ({}, "no debates were sampled"),
    (ZERO_SIGNAL, "zero signal"),
    ({"learner/updated": 0.0, "train/truncated_fraction": 1.0, "train/n_kept": 0.0}, "truncated"),
    ({"learner/updated": 0.0, "train/zero_advantage_fraction": 0.5, "train/truncated_fraction": 0.5,
      "train/n_kept": 0.0}, "the filters kept no turn"),
    (NONFINITE, "non-finite"),
])
def test_idle_steps_are_said_once_at_idle_after_with_the_last_steps_reason(metrics, reason):
    watch = StepWatch(nonfinite_patience=100, idle_after=2)
    lines = _observe(watch, [APPLIED, metrics, metrics, metrics, metrics])
    idle = [(step, line) for step, out in enumerate(lines, 1) for line in out if "no update in the last" in line]
    assert idle == [(3, f"step 3: no update in the last 2 steps; this step: {no_update_reason(metrics)}")]
    assert reason in idle[0][1]
    # an applied update ends the stretch; the next stretch is said again
    again = _observe(watch, [APPLIED, metrics, metrics])
    assert sum("no update in the last 2 steps" in line for out in again for line in out) == 1


def test_idle_after_zero_never_speaks():
    watch = StepWatch(nonfinite_patience=100, idle_after=0)
    assert all(not out for out in _observe(watch, [ZERO_SIGNAL] * 5))
    assert watch.idle_run == 5
