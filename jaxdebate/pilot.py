"""A pilot's decision, by the rules a protocol fixed in advance (results/arithmetic-v2/PROTOCOL.md).

A pilot runs two arms (a baseline and one other) over a few seeds in several settings, each setting
exported by ``launch/sweep.py --export <pilot>/<setting>``. Per setting this reports the SD of the
paired endpoint differences (arm − baseline, same seed), the cost of a run in CPU seconds and the
item-noise share, then picks the setting with the smallest variance × cost (the default setting
when the products are within ``tie`` of each other) and the number of seed blocks whose expected
paired CI half-width meets the target::

    python -m jaxdebate.pilot results/arithmetic-v2/pilot --baseline identity --arm coma \\
        --endpoint final_debate_accuracy --default b2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.errors import DataError, JaxDebateError
from jaxdebate.metrics import METRICS_FILE, read_metrics
from jaxdebate.stats import blocks_for_halfwidth
from jaxdebate.run_endpoints import ENDPOINTS


def _sd(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def setting_report(rows: Sequence[Mapping[str, Any]], costs: Mapping[str, float], *, baseline: str, arm: str,
                   endpoint: str, items: int) -> dict[str, Any]:
    """One setting's figures from its ``summary.json`` run rows and each run's CPU seconds (by run
    name ``<strategy>-seed<seed>``, :func:`run_cost`): the paired differences, their SD, the mean cost per finished
    run, and the item noise (mean binomial variance of the endpoint over ``items``) against the
    between-seed variance (pooled over the two arms)."""
    done = [r for r in rows if r.get("status") == "done" and r.get(endpoint) is not None]
    by = {(r["strategy"], r["seed"]): float(r[endpoint]) for r in done}
    seeds = sorted(s for (strategy, s) in by if strategy == baseline and (arm, s) in by)
    diffs = [by[(arm, s)] - by[(baseline, s)] for s in seeds]
    run_costs = [costs[f"{r['strategy']}-seed{r['seed']}"] for r in done
                 if f"{r['strategy']}-seed{r['seed']}" in costs]
    per_arm = [[by[(a, s)] for s in seeds] for a in (baseline, arm)]
    between = [v for v in (_sd(x) for x in per_arm) if v is not None]
    between_var = sum(v * v for v in between) / len(between) if between else None
    paired = [by[(a, s)] for s in seeds for a in (baseline, arm)]  # the same runs as the between-seed variance
    item_var = (sum(p * (1 - p) / items for p in paired) / len(paired)) if paired else None
    sd_d = _sd(diffs)
    cost = sum(run_costs) / len(run_costs) if run_costs else None
    return {
        "seeds": seeds, "differences": diffs, "mean_difference": sum(diffs) / len(diffs) if diffs else None,
        "sd_d": sd_d, "runs": len(done), "cost_cpu_s": cost,
        "variance_x_cost": sd_d * sd_d * cost if sd_d is not None and cost is not None else None,
        "between_seed_var": between_var, "item_var": item_var,
        "item_share": item_var / between_var if item_var is not None and between_var else None,
    }


def decide(reports: Mapping[str, Mapping[str, Any]], *, default: str, tie: float = 0.25,
           halfwidth: float = 0.04, min_blocks: int = 5) -> dict[str, Any]:
    """The setting with the smallest variance × cost (``default`` unless another is smaller by more
    than ``tie``) and the blocks for a paired 95% CI half-width <= ``halfwidth`` at its SD."""
    if default not in reports:
        raise ValueError(f"the default setting {default!r} is not among {sorted(reports)}")
    scored = {k: r["variance_x_cost"] for k, r in reports.items() if r.get("variance_x_cost") is not None}
    missing = sorted(set(reports) - set(scored))
    if missing:  # a setting without a score would silently lose the comparison
        return {"setting": None, "blocks": None,
                "why": f"no variance x cost for {', '.join(missing)} yet (needs 2 paired seeds)"}
    seeds = {k: len(r["seeds"]) for k, r in reports.items()}
    best = min(scored, key=scored.get)
    # the tie rule, exactly: another setting is chosen only if the default's product exceeds its
    # product by more than `tie` (default > (1 + tie) x best)
    chosen = best if scored[best] * (1 + tie) < scored[default] else default
    others = "; ".join(f"{k} {v:.4g}" for k, v in sorted(scored.items()) if k != chosen)
    why = (f"{chosen}: variance x cost {scored[chosen]:.4g} (others: {others})"
           + ("" if chosen == best else f"; {best} is smaller by no more than {tie:.0%}, so the default "
                                         f"{default} is kept"))
    sd = reports[chosen]["sd_d"]
    return {"setting": chosen, "sd_d": sd, "n_seeds": seeds,
            "blocks": blocks_for_halfwidth(sd, halfwidth, minimum=min_blocks), "halfwidth": halfwidth, "why": why}


def step0_validation_seconds(records: Sequence[Mapping[str, Any]]) -> float:
    """The wall seconds a run spent on its step-0 validation (``time/validation`` logged with step 1);
    0 when step 0 was read back (``val/cached``) or not logged."""
    if any(r.get("step") == 0 and r.get("val/cached") for r in records):
        return 0.0
    first = [r.get("time/validation") for r in records if r.get("step") == 1 and r.get("time/validation")]
    return float(first[-1]) if first else 0.0


def run_cost(state: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> float | None:
    """A run's CPU seconds without the step-0 validation: that validation is computed once per seed
    and reused by the seed's other runs whatever the setting, so the run that computed it pays for
    all of them. Its share is its wall time (:func:`step0_validation_seconds`) over the run's wall time."""
    cpu, wall = state.get("cpu_time_s"), state.get("wall_time_s")
    if cpu is None:
        return None
    share = min(1.0, step0_validation_seconds(records) / float(wall)) if wall else 0.0
    return float(cpu) * (1.0 - share)


def _costs(setting_dir: Path) -> dict[str, float]:
    out = {}
    for path in sorted((setting_dir / "runs").glob("*/run.json")):
        metrics = path.parent / METRICS_FILE
        records = read_metrics(metrics) if metrics.is_file() else []  # a cut last line is left out
        cost = run_cost(json.loads(path.read_text()), records)
        if cost is not None:
            out[path.parent.name] = cost
    return out


def _summary_rows(path: Path) -> list[dict[str, Any]]:
    """The ``runs`` of an exported ``summary.json`` (``--export``; a sweep directory's own summary.json,
    a list of status rows, is not one)."""
    try:
        summary = json.loads(path.read_text())
    except ValueError as e:
        raise DataError(f"{path} is not JSON: {e}") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("runs"), list):
        raise DataError(f"{path} is not an exported summary (an object with a 'runs' list, as "
                        f"launch/sweep.py --export writes)")
    return summary["runs"]


def report(pilot_dir: str | Path, *, baseline: str, arm: str, endpoint: str, default: str,
           items: int = 300) -> dict[str, Any]:
    """Every setting under ``pilot_dir`` (a directory with an exported ``summary.json``) and the decision."""
    pilot = Path(pilot_dir)
    settings = sorted(p.parent.name for p in pilot.glob("*/summary.json"))
    if not settings:
        raise FileNotFoundError(f"no exported settings (<setting>/summary.json) under {pilot}")
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    reports, strategies = {}, set()
    for name in settings:
        rows = _summary_rows(pilot / name / "summary.json")
        strategies |= {r.get("strategy") for r in rows}
        reports[name] = setting_report(rows, _costs(pilot / name), baseline=baseline, arm=arm,
                                       endpoint=endpoint, items=items)
    absent = [f"--{flag} {value}" for flag, value in (("baseline", baseline), ("arm", arm)) if value not in strategies]
    if absent:  # a typo would otherwise read as "not enough seeds yet"
        raise DataError(f"no run of {' or '.join(absent)} under {pilot}; its runs are of "
                        f"{', '.join(sorted(str(s) for s in strategies))}")
    return {"endpoint": endpoint, "baseline": baseline, "arm": arm, "settings": reports,
            "decision": decide(reports, default=default)}


def format_report(out: Mapping[str, Any]) -> str:
    def num(x, fmt="{:.3f}"):
        return "–" if x is None else fmt.format(x)

    lines = [f"| setting | paired seeds | {out['arm']} − {out['baseline']} (mean) | sd_d | CPU s / run | "
             "variance × cost | item share of between-seed variance |", "|---|---|---|---|---|---|---|"]
    for name, r in out["settings"].items():
        lines.append(f"| {name} | {len(r['seeds'])} | {num(r['mean_difference'], '{:+.3f}')} | {num(r['sd_d'])} | "
                     f"{num(r['cost_cpu_s'], '{:.0f}')} | {num(r['variance_x_cost'], '{:.3g}')} | "
                     f"{num(r['item_share'], '{:.2f}')} |")
    d = out["decision"]
    lines.append("")
    lines.append(f"Decision: setting {d['setting']}, N = {d['blocks']} blocks ({d['why']})" if d["setting"]
                 else f"Decision: none yet ({d['why']})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pilot_dir")
    parser.add_argument("--baseline", default="identity")
    parser.add_argument("--arm", default="coma")
    parser.add_argument("--endpoint", default="final_debate_accuracy", choices=sorted(ENDPOINTS))
    parser.add_argument("--default", default="b2", help="the setting kept unless another wins by more than 25%%")
    parser.add_argument("--items", type=int, default=300, help="evaluation items behind the endpoint")
    args = parser.parse_args(argv)
    try:
        out = report(args.pilot_dir, baseline=args.baseline, arm=args.arm, endpoint=args.endpoint,
                     default=args.default, items=args.items)
    except (FileNotFoundError, ValueError, JaxDebateError) as e:
        print(f"pilot: {e}", file=sys.stderr)
        return 2
    (Path(args.pilot_dir) / "decision.json").write_text(json.dumps(out, indent=2) + "\n")
    print(format_report(out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
