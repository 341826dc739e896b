"""The seed-level summary of a sweep: one row per run (endpoints, per-item McNemar test), the
per-strategy table, the comparison of strategies, and their markdown.

The unit of replication for a claim about a strategy is the seed, not the eval item: a seed fixes
the data order and sampling of all five arms, so it is a block (two-way strategy x seed ANOVA), a
strategy is compared with the baseline by a paired t over seeds with Holm's adjustment over the
comparisons, and "it learned" is a paired t of final minus initial accuracy over seeds. A claim
about one run uses the items, paired: McNemar's test on the per-item rows the validation writes.
A pre-registered design (:class:`Plan`, ``plan.json``) fixes the arms, seeds and endpoints, so what is
missing is counted against it; a run the divergence guard stopped counts with its last validation.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxdebate.errors import DataError
from jaxdebate.run_items import run_item_tests
from jaxdebate.stats import (
    blocked_anova,
    equivalence_test,
    holm_entries,
    one_sample_t,
    permutation_anova,
    seeds_needed,
    t_interval,
    two_proportion_test,
    wilson_interval,
)

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
MIXED_KIND, UNKNOWN_KIND = "mixed", "unknown"  # block_cpu_kinds' labels for no single kind
EQUIVALENCE_MARGIN = 0.05  # accuracy points within which two strategies count as equivalent
POWER_DIFFERENCES = (0.05, 0.10)


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


@dataclasses.dataclass(frozen=True)
class Plan:
    """A pre-registered design in machine form (``plan.json`` in a results directory, beside the
    protocol it transcribes): the arms, the seed blocks, the baseline, the primary endpoint and the
    secondary ones (every other endpoint is exploratory). With a plan, missing runs, seeds and arms are
    counted against it instead of against whatever data exists."""

    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    baseline: str
    endpoint: str
    secondary: tuple[str, ...] = ()
    protocol: str = ""

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read and check ``path``; a :class:`DataError` names the file and the field."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: not a readable JSON plan ({e})") from None
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(raw, dict) or set(raw) - fields or not {"arms", "seeds", "baseline", "endpoint"} <= set(raw):
            raise DataError(f"{path}: a plan has the fields {sorted(fields)} (arms, seeds, baseline and endpoint "
                            f"required), got {sorted(raw) if isinstance(raw, dict) else type(raw).__name__}")
        for name in ("arms", "seeds", "secondary"):
            if name in raw and not isinstance(raw[name], list):
                raise DataError(f"{path}: {name} must be a list, got {raw[name]!r}")
        plan = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
        problems = [
            (not plan.arms or not all(isinstance(a, str) for a in plan.arms), "arms", "a list of strategy names"),
            (len(set(plan.arms)) != len(plan.arms), "arms", "names each arm once"),
            (plan.baseline not in plan.arms, "baseline", f"one of the arms {list(plan.arms)}"),
            (not plan.seeds or not all(isinstance(k, int) and not isinstance(k, bool) for k in plan.seeds)
             or len(set(plan.seeds)) != len(plan.seeds), "seeds", "a list of distinct integer seeds"),
            (plan.endpoint not in ENDPOINTS, "endpoint", f"one of {sorted(ENDPOINTS)}"),
            (not set(plan.secondary) <= set(ENDPOINTS) - {plan.endpoint}, "secondary",
             "endpoints other than the primary one"),
        ]
        for bad, field, must in problems:
            if bad:
                raise DataError(f"{path}: {field} must be {must}, got {getattr(plan, field)!r}")
        return plan


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


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _sd(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def strategy_table(rows: Sequence[dict[str, Any]], endpoint: str = "final_accuracy",
                   seeds: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """Per strategy over its counted runs (finished or diverged; only ``seeds`` when given, as the
    comparison's complete blocks are): the endpoint's mean (key ``final_accuracy`` whatever the
    endpoint), the SD (ddof=1) and t 95% interval over seeds, the mean gain over step 0, and the mean
    training time (sum of step times) and wall-clock time of the sweep's attempts."""
    out = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        done = [r for r in rows if r["strategy"] == strategy and r.get(endpoint) is not None
                and r.get("status") not in UNFINISHED and (seeds is None or r["seed"] in seeds)]
        finals = [r[endpoint] for r in done]
        initial = INITIAL.get(endpoint)
        gains = [r[endpoint] - r[initial] for r in done if initial and r.get(initial) is not None]
        walls = [r["step_time_s"] for r in done if r.get("step_time_s")]
        clocks = [r["wall_time_s"] for r in done if r.get("wall_time_s")]
        interval = t_interval(finals)
        out.append({"strategy": strategy, "seeds": len(done), "endpoint": endpoint,
                    "final_accuracy": _mean(finals), "sd": _sd(finals),
                    "ci95": list(interval) if interval else None, "gain": _mean(gains),
                    "train_time_min": _mean(walls) / 60 if walls else None,
                    "wall_time_min": _mean(clocks) / 60 if clocks else None})
    return out


def _by_strategy_and_seed(rows: Iterable[dict[str, Any]], key: str) -> dict[str, dict[Any, float]]:
    table: dict[str, dict[Any, float]] = {}
    for r in rows:
        if r.get(key) is not None:
            table.setdefault(r["strategy"], {})[r["seed"]] = r[key]
    return table


def _t_entry(values: Sequence[float]) -> dict[str, Any]:
    """Mean, paired 95% interval, SD (ddof=1), t, df and p of seed-level differences (None below 2)."""
    if len(values) < 2:
        return {"ci95": None, "sd": None, "t": None, "df": None, "p": None}
    test = one_sample_t(values)
    return {k: test[k] for k in ("ci95", "sd", "t", "df", "p")}


def _with_holm(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holm over every entry, the untested ones at p = 1: the family is the planned comparisons
    whatever runs exist (PROTOCOL amendment 2026-11-28)."""
    holm_entries(entries, fixed_family=True)
    return entries


def claim(entry: dict[str, Any], baseline: str, alpha: float = 0.05) -> str:
    """What the pre-registered rule lets one say of a comparison with ``baseline``: a difference
    where Holm's p < ``alpha``, a ranking where the simultaneous interval also excludes 0,
    equivalence where the TOST interval lies inside the margin, else "inconclusive at this power"."""
    if entry.get("p") is None:
        return "no test"
    said = []
    if entry.get("p_holm") is not None and entry["p_holm"] < alpha:
        side = "below" if entry["mean_difference"] < 0 else "above"
        ci = entry.get("ci_simultaneous")
        ranked = bool(ci) and (ci[1] < 0 or ci[0] > 0)
        said.append(f"{side} {baseline}" + (" (ranked)" if ranked else " (Holm; not ranked)"))
    if (entry.get("equivalence") or {}).get("equivalent"):
        said.append(f"equivalent within ±{EQUIVALENCE_MARGIN:.2f}")
    return "; ".join(said) or "inconclusive at this power"


def _missing_status(status: str | None) -> str:
    """Why a planned cell does not count: no run, a run not finished, or one without its final value."""
    if status is None:
        return "absent"
    return status if status in UNFINISHED else f"{status}, no final value"


def design(rows: Sequence[dict[str, Any]], endpoint: str, arms: Sequence[str] | None = None,
           seeds: Sequence[Any] | None = None) -> dict[str, Any]:
    """The strategy x seed table a comparison tests, against the planned ``arms`` and ``seeds`` (by
    default: every strategy and seed that has a run, whatever its status). A cell counts when its run
    finished or diverged and has the endpoint; ``complete`` seeds have every arm. ``missing`` lists
    each planned cell that does not count, with its run's status (``absent``: no run), in the seeds
    that have a run; ``seeds_incomplete`` the seeds with some but not all cells, ``seeds_without_runs``
    those with none; ``seeds_not_planned`` the seeds with runs that the plan does not hold (left out
    of every test: a block added after the plan, say, needs the plan extended first)."""
    arms = list(arms) if arms is not None else list(dict.fromkeys(r["strategy"] for r in rows))
    seeds = list(seeds) if seeds is not None else list(dict.fromkeys(r["seed"] for r in rows))
    status = {(r["strategy"], r["seed"]): r.get("status") for r in rows}
    counted = _by_strategy_and_seed((r for r in rows if r.get("status") not in UNFINISHED), endpoint)
    values = {arm: {k: v for k, v in counted.get(arm, {}).items() if k in seeds} for arm in arms}
    complete = [k for k in seeds if all(k in values[arm] for arm in arms)]
    present = [k for k in seeds if any(k in values[arm] for arm in arms)]
    return {"arms": arms, "seeds": seeds, "values": values, "complete": complete,
            "seeds_incomplete": [k for k in present if k not in complete],
            "seeds_without_runs": [k for k in seeds if k not in present],
            # seeds no run has reached yet are summed up by seeds_without_runs, not listed cell by cell
            "missing": [{"strategy": arm, "seed": k, "status": _missing_status(status.get((arm, k)))}
                        for k in seeds for arm in arms if k not in values[arm]
                        and (k in present or (arm, k) in status)],
            "not_planned": sorted({r["strategy"] for r in rows} - set(arms)),
            "seeds_not_planned": [k for k in dict.fromkeys(r["seed"] for r in rows) if k not in seeds]}


def compare_strategies(rows: Sequence[dict[str, Any]], baseline: str = "identity",
                       endpoint: str = "final_accuracy", *, by_cpu: bool = True,
                       arms: Sequence[str] | None = None, seeds: Sequence[Any] | None = None) -> dict[str, Any]:
    """Do the strategies differ on ``endpoint``, with the seed as the unit?

    - ``blocked``: two-way strategy x seed ANOVA without replication on the complete blocks
      (``seeds_dropped``: the others), and the share of the sum of squares each explains;
    - ``vs_baseline``: each strategy minus ``baseline`` on the same seeds: mean, paired t 95% interval,
      t, df, p, Holm-adjusted ``p_holm`` over these comparisons, a TOST ``equivalence`` within
      ±:data:`EQUIVALENCE_MARGIN`, and the ``claim`` the pre-registered rule allows (:func:`claim`);
    - ``learning``: per strategy, final minus initial (step 0) on each seed, paired t over seeds
      (``p_holm`` over strategies);
    - ``power``: the pooled SD of the paired differences to the baseline and the seeds a paired t test
      needs to detect a 5- and a 10-point difference (80% power, two-sided alpha 0.05);
    - ``anova_f``/``anova_permutation_p``: the earlier one-way permutation ANOVA, which ignores seeds
      (exploratory: not in the pre-registered analysis);
    - ``ci_simultaneous`` per comparison: Bonferroni intervals (level 1 − 0.05/m) a ranking rests on;
      ``max_halfwidth``: the widest paired 95% half-width against the baseline (the precision rule);
    - the design (:func:`design`, against ``arms`` and ``seeds`` when a plan gives them):
      ``seeds_complete``, ``seeds_incomplete`` (left out of every test), ``seeds_without_runs``,
      ``missing`` cells with their status, ``diverged`` runs (counted with their last validation),
      ``seeds_not_planned`` (runs outside the plan's seeds, never counted);
    - ``sensitivity_by_cpu``: where complete blocks ran on several CPU kinds, the same comparison
      within each kind (reported, not claimed); blocks of mixed or unknown kind are left out of it
      and listed (``sensitivity_excluded_seeds``).

    Runs that have not finished (:data:`UNFINISHED`) never count.
    """
    d = design(rows, endpoint, arms, seeds)
    complete = d["complete"]
    values = {arm: {k: v for k, v in by_seed.items() if k in complete} for arm, by_seed in d["values"].items()}
    dropped = [k for k in d["seeds"] if k not in complete]
    rows = [r for r in rows if r.get("status") not in UNFINISHED]
    out: dict[str, Any] = {"baseline": baseline, "endpoint": endpoint, "anova_f": None,
                           "anova_permutation_p": None, "blocked": None, "vs_baseline": [],
                           "learning": [], "power": None, "seeds_complete": complete,
                           "seeds_incomplete": d["seeds_incomplete"], "seeds_without_runs": d["seeds_without_runs"],
                           "missing": d["missing"], "not_planned": d["not_planned"],
                           "seeds_not_planned": d["seeds_not_planned"],
                           "diverged": [{"strategy": r["strategy"], "seed": r["seed"], "final_step": r.get("final_step")}
                                        for r in rows if r.get("status") == DIVERGED],
                           "max_halfwidth": None}
    groups = [list(v.values()) for v in values.values()]
    if len(groups) >= 2 and sum(map(len, groups)) > len(groups):
        out["anova_f"], out["anova_permutation_p"] = permutation_anova(groups)
    try:
        blocked = blocked_anova(values)
    except ValueError:
        blocked = None
    if blocked:
        blocked["seeds_dropped"] = dropped
        total = blocked["ss"]["total"]
        blocked["ss_share"] = {k: (v / total if total else None) for k, v in blocked["ss"].items() if k != "total"}
        out["blocked"] = blocked
    base = values.get(baseline, {})
    diffs_by_strategy = {}
    # simultaneous intervals for the family of m comparisons (Bonferroni, level 1 - 0.05/m): where
    # one excludes 0, so does Holm (it never rejects less); a ranking rests on these
    m = sum(strategy != baseline for strategy in values)
    for strategy, by_seed in values.items():
        if strategy == baseline:
            continue
        paired = sorted(set(by_seed) & set(base))
        diffs = [by_seed[k] - base[k] for k in paired]
        diffs_by_strategy[strategy] = diffs
        entry = {"strategy": strategy, "seeds": paired, "mean_difference": _mean(diffs), **_t_entry(diffs)}
        entry["equivalence"] = equivalence_test(diffs, EQUIVALENCE_MARGIN) if len(diffs) >= 2 else None
        simultaneous = t_interval(diffs, level=1 - 0.05 / m)
        entry["ci_simultaneous"] = list(simultaneous) if simultaneous else None
        out["vs_baseline"].append(entry)
    _with_holm(out["vs_baseline"])
    for entry in out["vs_baseline"]:
        entry["claim"] = claim(entry, baseline)
    widths = [(e["ci95"][1] - e["ci95"][0]) / 2 for e in out["vs_baseline"] if e["ci95"]]
    out["max_halfwidth"] = max(widths) if widths else None  # the precision rule's figure (PROTOCOL: <= 0.05)
    initial = INITIAL.get(endpoint)
    if initial:
        starts = _by_strategy_and_seed(rows, initial)
        for strategy, by_seed in values.items():
            paired = sorted(set(by_seed) & set(starts.get(strategy, {})))
            gains = [by_seed[k] - starts[strategy][k] for k in paired]
            out["learning"].append({"strategy": strategy, "seeds": paired,
                                    "initial": _mean([starts[strategy][k] for k in paired]),
                                    "final": _mean([by_seed[k] for k in paired]),
                                    "mean_gain": _mean(gains), **_t_entry(gains)})
        _with_holm(out["learning"])
    out["power"] = _power(diffs_by_strategy.values())
    if by_cpu:
        kinds = block_cpu_kinds(rows)
        # a block that ran on several kinds, or recorded none, belongs to no kind's comparison
        unclear = [k for k in complete if kinds.get(k, UNKNOWN_KIND) in (MIXED_KIND, UNKNOWN_KIND)]
        used = sorted({kinds[k] for k in complete if k not in unclear})
        if len(used) > 1:  # PROTOCOL: the same comparison within each CPU kind, reported, not claimed
            out["sensitivity_by_cpu"] = {
                kind: compare_strategies(rows, baseline, endpoint, by_cpu=False, arms=d["arms"],
                                         seeds=[k for k in complete if kinds.get(k) == kind])
                for kind in used}
            for sub in out["sensitivity_by_cpu"].values():  # no claim rests on a sensitivity analysis
                for entry in sub["vs_baseline"]:
                    del entry["claim"]
            out["sensitivity_excluded_seeds"] = unclear
    return out


def block_cpu_kinds(rows: Iterable[dict[str, Any]]) -> dict[Any, str]:
    """Each seed block's CPU kind (the AVX-512/AMX flags its runs recorded), :data:`MIXED_KIND` when
    its runs ran on several kinds, :data:`UNKNOWN_KIND` when none recorded one."""
    kinds: dict[Any, set[str]] = {}
    for r in rows:
        kinds.setdefault(r["seed"], set()).update(r.get("cpu_kinds") or [])
    return {seed: (UNKNOWN_KIND if not k else next(iter(k)) if len(k) == 1 else MIXED_KIND) for seed, k in kinds.items()}


def _power(diff_lists: Iterable[Sequence[float]]) -> dict[str, Any] | None:
    """Seeds needed per comparison, from the pooled SD (ddof=1) of the paired differences."""
    usable = [d for d in diff_lists if len(d) >= 2]
    df = sum(len(d) - 1 for d in usable)
    if not df:
        return None
    sd = math.sqrt(sum(_sd(d) ** 2 * (len(d) - 1) for d in usable) / df)
    needed = {f"{x:.2f}": (seeds_needed(sd, x) if sd > 0 else 2) for x in POWER_DIFFERENCES}
    return {"paired_sd": sd, "df": df, "alpha": 0.05, "power": 0.8, "seeds_needed": needed}


def sweep_summary(rows: Sequence[dict[str, Any]], endpoint: str = "final_accuracy",
                  baseline: str = "identity", plan: Plan | None = None) -> dict[str, Any]:
    """``summary.json``'s content: ``runs``, the per-strategy ``table`` (complete blocks) and the
    ``comparison`` on the primary ``endpoint``, and ``secondary_endpoints`` (the comparison on every
    other endpoint the runs have). A ``plan`` sets the endpoint, baseline, arms and seeds; its
    non-secondary endpoints are listed as ``exploratory``, ``blocks`` counts complete blocks against
    the planned ones, and a comparison's ``claim`` is None until they are all complete (and always on
    an exploratory endpoint)."""
    arms = seeds = None
    if plan is not None:
        endpoint, baseline, arms, seeds = plan.endpoint, plan.baseline, plan.arms, plan.seeds
    comparison = compare_strategies(rows, baseline, endpoint, arms=arms, seeds=seeds)
    secondary = {name: compare_strategies(rows, baseline, name, arms=arms, seeds=seeds) for name in ENDPOINTS
                 if name != endpoint and any(r.get(name) is not None for r in rows)}
    out = {"endpoint": endpoint, "runs": list(rows),
           "table": strategy_table(rows, endpoint, comparison["seeds_complete"]),
           "comparison": comparison, "secondary_endpoints": secondary}
    if plan is not None:
        out["plan"] = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(plan).items()}
        out["exploratory"] = [name for name in secondary if name not in plan.secondary]
        out["blocks"] = {"planned": len(plan.seeds), "complete": len(comparison["seeds_complete"])}
        # PROTOCOL: nothing is claimed before the last block, nor on an exploratory endpoint
        interim = out["blocks"]["complete"] < out["blocks"]["planned"]
        for name, c in [(endpoint, comparison), *secondary.items()]:
            if interim or name in out["exploratory"]:
                for entry in c["vs_baseline"]:
                    entry["claim"] = None
    return out
