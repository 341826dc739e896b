"""The seed-level comparison of a sweep's runs (their rows from :mod:`jaxdebate.run_endpoints`): the
per-strategy table, the comparison of strategies, and ``summary.json``'s content.

The unit of replication for a claim about a strategy is the seed, not the eval item: a seed fixes
the data order and sampling of all five arms, so it is a block (two-way strategy x seed ANOVA), a
strategy is compared with the baseline by a paired t over seeds with Holm's adjustment over the
comparisons, and "it learned" is a paired t of final minus initial accuracy over seeds.
A pre-registered design (:class:`Plan`, ``plan.json``) fixes the arms, seeds and endpoints, so what is
missing is counted against it; a run the divergence guard stopped counts with its last validation.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.errors import DataError
from jaxdebate.run_endpoints import DIVERGED, ENDPOINTS, INITIAL, UNFINISHED
from jaxdebate.stats import (
    blocked_anova,
    equivalence_test,
    holm_entries,
    one_sample_t,
    permutation_anova,
    seeds_needed,
    t_interval,
)

MIXED_KIND, UNKNOWN_KIND = "mixed", "unknown"  # block_cpu_kinds' labels for no single kind
EQUIVALENCE_MARGIN = 0.05  # accuracy points within which two strategies count as equivalent
POWER_DIFFERENCES = (0.05, 0.10)


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
