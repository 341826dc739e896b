"""The seed-level summary of a sweep: one row per run (endpoints, per-item McNemar test), the
per-strategy table, the comparison of strategies, and their markdown.

The unit of replication for a claim about a strategy is the seed, not the eval item: a seed fixes
the data order and sampling of all five arms, so it is a block (two-way strategy x seed ANOVA), a
strategy is compared with the baseline by a paired t over seeds with Holm's adjustment over the
comparisons, and "it learned" is a paired t of final minus initial accuracy over seeds. A claim
about one run uses the items, paired: McNemar's test on the per-item rows the validation writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxdebate.stats import (
    blocked_anova,
    equivalence_test,
    holm_entries,
    one_sample_t,
    paired_mcnemar,
    permutation_anova,
    seeds_needed,
    t_interval,
    two_proportion_test,
    wilson_interval,
)

if TYPE_CHECKING:
    from jaxdebate.analysis import Run

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
VALIDATION_DIR = "validation"
#: run statuses (``run.json``) whose last validation is not a final one
UNFINISHED = frozenset({"pending", "running", "interrupted", "failed", "submitted"})
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


def endpoint_values(run: Run) -> dict[str, Any]:
    """Every endpoint ``run`` has (see :data:`ENDPOINTS`; an area needs three validations), with the
    initial (step 0) value of each final one, the step of the final validation and the items it
    counted."""
    out: dict[str, Any] = {}
    for name, (how, keys) in ENDPOINTS.items():
        key, steps, values = _curve(run, keys)
        if key is None:
            continue
        if how == "auc":  # with two validations the area is just the mean of the first and the last
            if len(steps) >= 3:
                out[name] = curve_area(steps, values)
            continue
        out[name] = values[-1] if steps[-1] > 0 else None
        out[INITIAL[name]] = values[0] if steps[0] == 0 else None
        items_key = key.split("accuracy")[0] + "items"
        items = [metric_number(r.get(items_key)) for r in run.records if key in r]
        out[f"{name}/step"] = steps[-1]
        out[f"{name}/items"] = int(items[-1]) if items and items[-1] else None
    return out


def _item_rows(path: Path) -> dict[str, dict[str, bool]]:
    """``"set/mode" -> {id: correct_final}`` of one ``validation/step_<N>.jsonl`` file."""
    out: dict[str, dict[str, bool]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                out.setdefault(f"{row['set']}/{row['mode']}", {})[str(row["id"])] = bool(row["correct_final"])
    return out


def step_files(workdir: str | Path) -> list[tuple[int, Path]]:
    """A run's per-item validation files ``(step, path)``, by step."""
    folder = Path(workdir) / VALIDATION_DIR
    files = [(p.stem.removeprefix("step_"), p) for p in folder.glob("step_*.jsonl")] if folder.is_dir() else []
    return sorted((int(step), p) for step, p in files if step.isdigit())


def run_item_tests(workdir: str | Path) -> dict[str, dict[str, Any]]:
    """Per ``"set/mode"`` present in both the first and the last per-item validation file of a run:
    McNemar's exact test of the last step against the first on the same items (paired on ``id``).
    {} when the run wrote fewer than two such files (runs before per-item validation)."""
    files = step_files(workdir)
    if len(files) < 2:
        return {}
    (first_step, first_path), (last_step, last_path) = files[0], files[-1]
    first, last = _item_rows(first_path), _item_rows(last_path)
    out = {}
    for group in first:
        if group in last:
            test = paired_mcnemar(first[group], last[group])
            if test["n"]:
                out[group] = {"n": test["n"], "first_step": first_step, "last_step": last_step,
                              "first_acc": test["first_acc"], "last_acc": test["second_acc"],
                              "only_first": test["only_first"], "only_last": test["only_second"],
                              "p_mcnemar": test["p"]}
    return out


def run_item_test(workdir: str | Path, set: str = "heldout", mode: str = "debate") -> dict[str, Any] | None:
    """One run's first vs last validation on the same items of one set and mode (McNemar's exact
    test): ``n``, ``first_acc``, ``last_acc``, ``only_first``, ``only_last``, ``p_mcnemar`` (and the
    two steps); None when the run has no such per-item files."""
    return run_item_tests(workdir).get(f"{set}/{mode}")


def run_summary(run: Run) -> dict[str, Any]:
    """One run's row of ``summary.json``: every endpoint it has (``initial_accuracy`` and
    ``final_accuracy`` are the single-agent ones), steps, status, training time, the per-item
    McNemar tests when the run wrote per-item rows, and, for runs without them, Wilson intervals and
    an (unpaired, item-level) two-proportion test of the first against the last validation."""
    values = endpoint_values(run)
    last_step = max((r.get("step", 0) for r in run.records), default=0)
    row: dict[str, Any] = {
        "strategy": run.strategy, "seed": run.seed, "status": run.state.get("status", "unknown"),
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


def strategy_table(rows: Sequence[dict[str, Any]], endpoint: str = "final_accuracy") -> list[dict[str, Any]]:
    """Per strategy over its seeds with the endpoint: its mean (key ``final_accuracy`` whatever the
    endpoint), the SD (ddof=1) and t 95% interval over seeds, the mean gain over step 0, and the mean
    training time (sum of step times) and wall-clock time of the sweep's attempts."""
    out = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        done = [r for r in rows if r["strategy"] == strategy and r.get(endpoint) is not None]
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
    holm_entries(entries)
    return entries


def compare_strategies(rows: Sequence[dict[str, Any]], baseline: str = "identity",
                       endpoint: str = "final_accuracy", *, by_cpu: bool = True) -> dict[str, Any]:
    """Do the strategies differ on ``endpoint``, with the seed as the unit?

    - ``blocked``: two-way strategy x seed ANOVA without replication (seeds missing a strategy are
      dropped: ``seeds_dropped``), and the share of the sum of squares each explains;
    - ``vs_baseline``: each strategy minus ``baseline`` on the same seeds: mean, paired t 95% interval,
      t, df, p, Holm-adjusted ``p_holm`` over these comparisons, and a TOST ``equivalence`` within
      ±:data:`EQUIVALENCE_MARGIN`;
    - ``learning``: per strategy, final minus initial (step 0) on each seed, paired t over seeds
      (``p_holm`` over strategies);
    - ``power``: the pooled SD of the paired differences to the baseline and the seeds a paired t test
      needs to detect a 5- and a 10-point difference (80% power, two-sided alpha 0.05);
    - ``anova_f``/``anova_permutation_p``: the earlier one-way permutation ANOVA, which ignores seeds
      (exploratory: not in the pre-registered analysis);
    - ``ci_simultaneous`` per comparison: Bonferroni intervals (level 1 − 0.05/m) a ranking rests on;
      ``max_halfwidth``: the widest paired 95% half-width against the baseline (the precision rule);
    - ``seeds_incomplete``: seeds some strategy lacks a finished run for, left out of every test;
    - ``sensitivity_by_cpu``: where complete blocks ran on several CPU kinds, the same comparison
      within each kind (reported, not claimed).

    Runs that have not finished (:data:`UNFINISHED`) are left out.
    """
    # only finished runs count: an interrupted run's last validation is not its final one
    rows = [r for r in rows if r.get("status") not in UNFINISHED]
    values = _by_strategy_and_seed(rows, endpoint)
    # the paired tests use the complete blocks only (every strategy has the seed), as the blocked
    # ANOVA does; the others are listed
    all_seeds = list(dict.fromkeys(k for by_seed in values.values() for k in by_seed))
    complete = [k for k in all_seeds if all(k in by_seed for by_seed in values.values())]
    incomplete = [k for k in all_seeds if k not in complete]
    if len(values) >= 2:
        values = {strategy: {k: v for k, v in by_seed.items() if k in complete} for strategy, by_seed in values.items()}
    out: dict[str, Any] = {"baseline": baseline, "endpoint": endpoint, "anova_f": None,
                           "anova_permutation_p": None, "blocked": None, "vs_baseline": [],
                           "learning": [], "power": None, "seeds_incomplete": incomplete,
                           "max_halfwidth": None}
    groups = [list(v.values()) for v in values.values()]
    if len(groups) >= 2 and sum(map(len, groups)) > len(groups):
        out["anova_f"], out["anova_permutation_p"] = permutation_anova(groups)
    try:
        blocked = blocked_anova(values)
    except ValueError:
        blocked = None
    if blocked:
        blocked["seeds_dropped"] = incomplete
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
        seeds = sorted(set(by_seed) & set(base))
        diffs = [by_seed[k] - base[k] for k in seeds]
        diffs_by_strategy[strategy] = diffs
        entry = {"strategy": strategy, "seeds": seeds, "mean_difference": _mean(diffs), **_t_entry(diffs)}
        entry["equivalence"] = equivalence_test(diffs, EQUIVALENCE_MARGIN) if len(diffs) >= 2 else None
        simultaneous = t_interval(diffs, level=1 - 0.05 / m)
        entry["ci_simultaneous"] = list(simultaneous) if simultaneous else None
        out["vs_baseline"].append(entry)
    _with_holm(out["vs_baseline"])
    widths = [(e["ci95"][1] - e["ci95"][0]) / 2 for e in out["vs_baseline"] if e["ci95"]]
    out["max_halfwidth"] = max(widths) if widths else None  # the precision rule's figure (PROTOCOL: <= 0.05)
    initial = INITIAL.get(endpoint)
    if initial:
        starts = _by_strategy_and_seed(rows, initial)
        for strategy, by_seed in values.items():
            seeds = sorted(set(by_seed) & set(starts.get(strategy, {})))
            gains = [by_seed[k] - starts[strategy][k] for k in seeds]
            out["learning"].append({"strategy": strategy, "seeds": seeds,
                                    "initial": _mean([starts[strategy][k] for k in seeds]),
                                    "final": _mean([by_seed[k] for k in seeds]),
                                    "mean_gain": _mean(gains), **_t_entry(gains)})
        _with_holm(out["learning"])
    out["power"] = _power(diffs_by_strategy.values())
    if by_cpu:
        kinds = block_cpu_kinds(rows)
        used = {kinds[k] for k in complete if k in kinds}
        if len(used) > 1:  # PROTOCOL: the same comparison within each CPU kind, reported, not claimed
            out["sensitivity_by_cpu"] = {
                kind: compare_strategies([r for r in rows if kinds.get(r["seed"]) == kind], baseline, endpoint,
                                         by_cpu=False)
                for kind in sorted(used)}
    return out


def block_cpu_kinds(rows: Iterable[dict[str, Any]]) -> dict[Any, str]:
    """Each seed block's CPU kind (the AVX-512/AMX flags its runs recorded), ``mixed`` when its runs
    ran on several kinds, ``unknown`` when none recorded one."""
    kinds: dict[Any, set[str]] = {}
    for r in rows:
        kinds.setdefault(r["seed"], set()).update(r.get("cpu_kinds") or [])
    return {seed: ("unknown" if not k else next(iter(k)) if len(k) == 1 else "mixed") for seed, k in kinds.items()}


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
              baseline: str = "identity") -> dict[str, Any]:
    """``summary.json``'s content: ``runs``, the per-strategy ``table`` and the ``comparison`` on the
    primary ``endpoint``, and ``secondary_endpoints`` (the comparison on every other endpoint the
    runs have)."""
    secondary = {name: compare_strategies(rows, baseline, name) for name in ENDPOINTS
                 if name != endpoint and any(r.get(name) is not None for r in rows)}
    return {"endpoint": endpoint, "runs": list(rows), "table": strategy_table(rows, endpoint),
            "comparison": compare_strategies(rows, baseline, endpoint), "secondary_endpoints": secondary}


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ci(ci: Sequence[float] | None, signed: bool = True) -> str:
    if not ci:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"[{f.format(ci[0])}, {f.format(ci[1])}]"


def format_comparison(comparison: dict[str, Any]) -> str:
    """The comparison as markdown: the blocked ANOVA, the paired differences to the baseline (p and
    Holm's p), the learning over step 0 and the power line (plus the earlier one-way ANOVA)."""
    p = comparison["anova_permutation_p"]
    lines = [f"Endpoint: `{comparison.get('endpoint', 'final_accuracy')}`. Unit of replication: the seed.", ""]
    b = comparison.get("blocked")
    if b:
        share = {k: (v or 0.0) for k, v in b.get("ss_share", {}).items()}  # None: every cell equal
        dropped = b["seeds_dropped"]
        lines += [f"Blocked by seed (two-way ANOVA, strategy x seed, no replication; seeds "
                  f"{', '.join(map(str, b['seeds_used']))}"
                  + (f"; dropped for a missing cell: {', '.join(map(str, dropped))}" if dropped else "")
                  + f"): strategy F({b['strategy_df']}, {b['residual_df']}) = {b['strategy_F']:.2f}, "
                  f"p = {_p(b['strategy_p'])}; seed F({b['seed_df']}, {b['residual_df']}) = {b['seed_F']:.2f}, "
                  f"p = {_p(b['seed_p'])}. Share of the sum of squares: strategy {share.get('strategy', 0):.0%}, "
                  f"seed {share.get('seed', 0):.0%}, residual {share.get('residual', 0):.0%}.", ""]
    elif not any(c.get("p") is not None for c in comparison["vs_baseline"] + comparison.get("learning", [])):
        lines += ["Fewer than two seeds per strategy: no seed-level test (the per-run Wilson intervals and "
                  "two-proportion tests in summary.json count items, not seeds).", ""]
    if comparison.get("seeds_incomplete"):
        lines += [f"Left out of every test (a strategy has no finished run there): seeds "
                  f"{', '.join(map(str, comparison['seeds_incomplete']))}.", ""]
    lines += ["Exploratory, ignoring seeds (permutation one-way ANOVA): "
              + ("n/a" if p is None else f"F = {comparison['anova_f']:.2f}, p = {p:.3f}")]
    if comparison["vs_baseline"]:
        lines += ["", f"| strategy − {comparison['baseline']} (same seed) | seeds | mean difference | paired 95% CI "
                  f"| simultaneous CI (Bonferroni) | t (df) | p | Holm p | within ±{EQUIVALENCE_MARGIN:.2f} (TOST p) |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for c in comparison["vs_baseline"]:
        diff = "-" if c["mean_difference"] is None else f"{c['mean_difference']:+.3f}"
        t = "-" if c.get("t") is None else f"{c['t']:.2f} ({c['df']})"
        eq = c.get("equivalence")
        eq_cell = "-" if not eq else f"{'yes' if eq['equivalent'] else 'no'} ({_p(eq['p'])})"
        lines.append(f"| {c['strategy']} | {len(c['seeds'])} | {diff} | {_ci(c['ci95'])} | "
                     f"{_ci(c.get('ci_simultaneous'))} | {t} | {_p(c.get('p'))} | {_p(c.get('p_holm'))} | {eq_cell} |")
    if comparison.get("max_halfwidth") is not None:
        lines += ["", f"Widest paired 95% half-width against {comparison['baseline']}: "
                  f"{comparison['max_halfwidth']:.3f}."]
    if comparison.get("learning"):
        lines += ["", "| strategy: final − step 0 (same seed) | seeds | initial | final | mean gain | "
                  "paired 95% CI | t (df) | p | Holm p |", "|---|---|---|---|---|---|---|---|---|"]
        for g in comparison["learning"]:
            t = "-" if g.get("t") is None else f"{g['t']:.2f} ({g['df']})"
            lines.append(f"| {g['strategy']} | {len(g['seeds'])} | {_num(g['initial'])} | "
                         f"{_num(g['final'])} | {_num(g['mean_gain'], '{:+.3f}')} | {_ci(g['ci95'])} | "
                         f"{t} | {_p(g['p'])} | {_p(g['p_holm'])} |")
    power = comparison.get("power")
    if power:
        needed = ", ".join(f"{v if v is not None else '> 100000'} seeds for a {float(k) * 100:.0f}-point difference"
                           for k, v in power["seeds_needed"].items())
        lines += ["", f"Power (descriptive): the paired differences to {comparison['baseline']} have a pooled SD of "
                  f"{power['paired_sd']:.3f} (df {power['df']}); a paired t test (two-sided alpha 0.05) "
                  f"reaches 80% power with {needed}."]
    for kind, sub in (comparison.get("sensitivity_by_cpu") or {}).items():
        sb = sub.get("blocked")
        diffs = ", ".join(f"{c['strategy']} {c['mean_difference']:+.3f}" for c in sub["vs_baseline"]
                          if c["mean_difference"] is not None)
        lines += ["", f"Sensitivity, blocks on CPU kind `{kind}` only (reported, not claimed): "
                  + (f"strategy p = {_p(sb['strategy_p'])} over seeds {', '.join(map(str, sb['seeds_used']))}; "
                     if sb else "") + f"differences to {comparison['baseline']}: {diffs or '-'}."]
    return "\n".join(lines)


def format_strategy_table(table: Sequence[dict[str, Any]]) -> str:
    """The strategy table as markdown."""
    endpoint = table[0].get("endpoint", "final_accuracy") if table else "final_accuracy"
    label = "final held-out accuracy" if endpoint == "final_accuracy" else f"`{endpoint}`"
    lines = [f"| strategy | seeds | {label} (mean) | SD over seeds | 95% CI over seeds | "
             "gain vs step 0 | step time / run |", "|---|---|---|---|---|---|---|"]
    for t in table:
        wall = "-" if t["train_time_min"] is None else f"{t['train_time_min']:.1f} min"
        lines.append(f"| {t['strategy']} | {t['seeds']} | {_num(t['final_accuracy'])} | {_num(t.get('sd'))} | "
                     f"{_ci(t['ci95'], signed=False)} | {_num(t['gain'], '{:+.3f}')} | {wall} |")
    return "\n".join(lines)


def format_summary(summary: Mapping[str, Any]) -> str:
    """``table.md``: the strategy table and the comparison on the primary endpoint, then the
    comparison on each secondary endpoint."""
    parts = [format_strategy_table(summary["table"]), format_comparison(summary["comparison"])]
    for name, comparison in summary.get("secondary_endpoints", {}).items():
        parts.append(f"### Secondary endpoint `{name}`\n\n{format_comparison(comparison)}")
    return "\n\n".join(parts) + "\n"
