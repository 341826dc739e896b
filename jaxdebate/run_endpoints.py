"""One run's endpoints, read from its metrics: the validation curves' final values and areas (a
final value needs the validation at the planned last step), the step at which the divergence guard
stopped it, and its row of ``summary.json`` with the run-level tests (Wilson intervals, the unpaired
two-proportion test and, where the run wrote per-item rows, McNemar's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jaxdebate.run_items import run_item_tests
from jaxdebate.stats import two_proportion_test, wilson_interval

if TYPE_CHECKING:
    from jaxdebate.sweep_runs import Run

# Validation metrics: the first version wrote one set (``val/accuracy/debate``: the plurality of the
# configured debate, which was a single agent in the committed arithmetic runs); validation with
# both modes writes ``val/single/...`` and ``val/debate/...``.
VAL_DEBATE = "val/accuracy/debate"
VAL_SINGLE = "val/single/accuracy"
VAL_DEBATE_HELDOUT = "val/debate/accuracy/debate"
VAL_TRANSFER = "val/transfer/accuracy"  # the never-trained templates, at the first and the last step

#: endpoint -> (``final`` value or ``auc`` of the validation curve, metric keys: the first a run has)
ENDPOINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "final_accuracy": ("final", (VAL_SINGLE, VAL_DEBATE)),
    "final_debate_accuracy": ("final", (VAL_DEBATE_HELDOUT,)),
    "auc_accuracy": ("auc", (VAL_SINGLE, VAL_DEBATE)),
    "auc_debate_accuracy": ("auc", (VAL_DEBATE_HELDOUT,)),
    "transfer_accuracy": ("final", (VAL_TRANSFER,)),
}
#: a ``final`` endpoint's value at step 0, against which a run's learning is measured
INITIAL = {"final_accuracy": "initial_accuracy", "final_debate_accuracy": "initial_debate_accuracy",
           "transfer_accuracy": "initial_transfer_accuracy"}
#: run statuses (``run.json``) whose last validation is not a final one
UNFINISHED = frozenset({"pending", "running", "interrupted", "failed", "submitted"})
#: a failed run that the divergence guard stopped (``training.nonfinite_patience`` non-finite updates in a
#: row, none applied): not missing, its last validation is its final value (PROTOCOL amendment 2026-11-28)
DIVERGED = "diverged"
LEARNER = "learner/"  # the loop logs the learner's metrics under it (rl.step_metrics)
NONFINITE_PREFIX = f"{LEARNER}nonfinite/"


def metric_number(x: Any) -> float | None:
    """A logged metric value as a float (NaN/inf arrive as strings); None for non-numbers."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _curve(run: Run, keys: Sequence[str]) -> tuple[str | None, list[int], list[float]]:
    """The first of ``keys`` that ``run`` logged, with its validation steps and values (a step
    validated twice, by a resumed run, counts once: its last record)."""
    for key in keys:
        steps, values = run.series(key)
        if len(steps):
            by_step = {int(s): float(v) for s, v in zip(steps, values)}
            return key, sorted(by_step), [by_step[s] for s in sorted(by_step)]
    return None, [], []


def curve_area(steps: Sequence[int], values: Sequence[float]) -> float | None:
    """Area under a validation curve (trapezoid rule) divided by its step span: the mean accuracy
    over training, in accuracy units; None for fewer than two validations."""
    if len(steps) < 2 or steps[-1] == steps[0]:
        return None
    area = sum((s1 - s0) * (v0 + v1) / 2 for s0, s1, v0, v1 in zip(steps, steps[1:], values, values[1:]))
    return area / (steps[-1] - steps[0])


def divergence_stop(run: Run) -> int | None:
    """The step at which the divergence guard stopped ``run``, or None: its sweep status is ``failed``
    and its last ``training.nonfinite_patience`` updates (the run's config.json) were all non-finite."""
    patience = run.config.get("training", {}).get("nonfinite_patience")
    if run.state.get("status") != "failed" or not isinstance(patience, int) or patience < 1:
        return None
    from jaxdebate.rl.optim import nonfinite_update  # the guard's own test; only failed runs pay the import

    updates = {r["step"]: r for r in run.records if "step" in r and any(k.startswith(NONFINITE_PREFIX) for k in r)}
    last = sorted(updates)[-patience:]
    if len(last) < patience or last != list(range(last[0], last[0] + patience)) or \
            last[-1] != max(r.get("step", 0) for r in run.records):
        return None
    bad = all(nonfinite_update(updates[step], prefix=LEARNER) for step in last)
    return last[-1] if bad else None


def endpoint_values(run: Run, *, stopped_at: int | None = None) -> dict[str, Any]:
    """Every endpoint ``run`` has (see :data:`ENDPOINTS`; an area needs three validations), with the
    initial (step 0) value of each final one, the step of the final validation and the items it
    counted. A final value or an area needs the validation at the run's planned last step
    (``training.total_train_steps`` in its config.json, where it has one), whatever its status says:
    an earlier step's value is never a final one. A run stopped by the divergence guard
    (``stopped_at``) keeps its last validation as its final value, carried to the planned last step
    for the areas (a run stopped before its second validation has the area of a flat curve)."""
    out: dict[str, Any] = {}
    last_step = run.config.get("training", {}).get("total_train_steps")
    last_step = last_step if isinstance(last_step, int) and not isinstance(last_step, bool) else None
    stopped = stopped_at is not None
    for name, (how, keys) in ENDPOINTS.items():
        key, steps, values = _curve(run, keys)
        if key is None:
            continue
        if stopped and last_step is not None and steps[-1] < last_step:
            curve = [*steps, last_step], [*values, values[-1]]
        else:
            curve = steps, values
        reached = last_step is None or curve[0][-1] >= last_step
        if how == "auc":  # with two validations the area is just the mean of the first and the last
            if reached and (len(curve[0]) >= 3 or (stopped and len(curve[0]) >= 2)):
                out[name] = curve_area(*curve)
            continue
        out[name] = values[-1] if reached and (steps[-1] > 0 or stopped) else None
        out[INITIAL[name]] = values[0] if steps[0] == 0 else None
        items_key = key.split("accuracy")[0] + "items"
        items = [metric_number(r.get(items_key)) for r in run.records if key in r]
        out[f"{name}/step"] = steps[-1]
        out[f"{name}/items"] = int(items[-1]) if items and items[-1] else None
    return out


def run_summary(run: Run) -> dict[str, Any]:
    """One run's row of ``summary.json``: every endpoint it has (``initial_accuracy`` and
    ``final_accuracy`` are the single-agent ones), steps, status, training time, Wilson intervals and
    an unpaired two-proportion test of the first against the last validation (the only item-level
    test a run without per-item rows allows), and, when the run wrote per-item rows, the paired
    McNemar tests (``item_tests``: what a claim about the run uses). The status is the sweep's, or
    :data:`DIVERGED` for a failed run the divergence guard stopped."""
    stopped_at = divergence_stop(run)
    values = endpoint_values(run, stopped_at=stopped_at)
    last_step = max((r.get("step", 0) for r in run.records), default=0)
    row: dict[str, Any] = {
        "strategy": run.strategy, "seed": run.seed,
        "status": DIVERGED if stopped_at is not None else run.state.get("status", "unknown"),
        "steps": int(last_step), "wall_time_s": run.state.get("wall_time_s"),
        "step_time_s": _step_time(run.records), "no_update_steps": _no_update_steps(run.records),
        "initial_accuracy": values.get("initial_accuracy"), "final_accuracy": values.get("final_accuracy"),
        "final_step": values.get("final_accuracy/step"), "validation_items": values.get("final_accuracy/items"),
    }
    attempts = run.state.get("history") or [run.state]
    row["cpu_kinds"] = sorted({a["cpu_flags"] for a in attempts if a.get("cpu_flags")})
    for name in ("initial_debate_accuracy", "final_debate_accuracy", "auc_accuracy", "auc_debate_accuracy",
                 "initial_transfer_accuracy", "transfer_accuracy"):
        if name in values:
            row[name] = values[name]
    n = row["validation_items"]
    if n and row["initial_accuracy"] is not None and row["final_accuracy"] is not None:
        k0, k1 = round(row["initial_accuracy"] * n), round(row["final_accuracy"] * n)
        row["initial_ci95"], row["final_ci95"] = list(wilson_interval(k0, n)), list(wilson_interval(k1, n))
        row["z"], row["p_two_proportion"] = two_proportion_test(k0, n, k1, n)
    item_tests = run_item_tests(run.workdir)
    if item_tests:
        row["item_tests"] = item_tests
    return row


def _step_time(records: Sequence[dict[str, Any]]) -> float | None:
    """The sum of ``time/step`` over a run's steps (the last record of each step counts): its
    training time, which unlike the sweep's wall clock survives a killed and resumed attempt."""
    last = {r["step"]: metric_number(r.get("time/step")) for r in records if "step" in r and "time/step" in r}
    times = [t for t in last.values() if t is not None]
    return float(sum(times)) if times else None


def _no_update_steps(records: Sequence[dict[str, Any]]) -> int:
    """Steps whose every group was filtered (zero signal or truncated): the policy did not move."""
    last = {r["step"]: r for r in records if "step" in r and "train/n_kept" in r}
    return sum(1 for r in last.values() if metric_number(r.get("train/n_kept")) == 0)
