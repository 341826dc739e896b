"""Compare strategies across a sweep: the final-accuracy table, the seed-level comparison
(:mod:`jaxdebate.sweep_stats`), the plots (:mod:`jaxdebate.sweep_plots`), and the committable results
of a sweep (``--results``: summary.json, table.md, answers.md, each run's small files, the plots).

    python -m jaxdebate.analysis runs/sweep --out runs/sweep/plots
    python -m jaxdebate.analysis runs/arithmetic --results results/arithmetic   # committable artefacts
    python -m jaxdebate.analysis runs/sweep --results results/x --endpoint final_debate_accuracy

A sweep directory holds one workdir per run (``<strategy>-seed<seed>``, each with ``metrics.jsonl``);
:mod:`jaxdebate.sweep` makes them, but any directories of runs laid out that way work (read by
:mod:`jaxdebate.sweep_runs`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate import validation_files
from jaxdebate.answer_profile import format_profiles, profiles
from jaxdebate.errors import DataError
from jaxdebate.metrics import METRICS_FILE
from jaxdebate.provenance import provenance
from jaxdebate.run_endpoints import ENDPOINTS, VAL_DEBATE, VAL_DEBATE_HELDOUT, VAL_SINGLE, run_summary
from jaxdebate.sweep_plots import write_plots
from jaxdebate.sweep_report import format_summary
from jaxdebate.sweep_runs import VAL_AGENT_PREFIX, VAL_ALL, Run, load_sweep, strategies
from jaxdebate.sweep_stats import Plan, sweep_summary

ANSWERS_FILE = "answers.md"  # what each run answered at its last validation (jaxdebate.answer_profile)
PLAN_FILE = "plan.json"  # a results directory's pre-registered design (sweep_stats.Plan)


def final_accuracy_table(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per strategy: final validation accuracy (debate plurality, each agent, all turns; both modes
    when validation ran both), mean and SD (ddof=1) over seeds, with the number of seeds that
    reached a validation."""
    rows = []
    for strategy in strategies(runs):
        members = [r for r in runs if r.strategy == strategy]
        row: dict[str, Any] = {"strategy": strategy, "seeds": len(members)}
        keys = [k for k in (VAL_DEBATE_HELDOUT, VAL_SINGLE) if any(k in r.keys() for r in members)]
        keys += [VAL_DEBATE, VAL_ALL] + sorted(
            {k for r in members for k in r.keys() if k.startswith(VAL_AGENT_PREFIX)}
        )
        for key in keys:
            finals = []
            for r in members:
                _, values = r.series(key)
                if len(values):
                    finals.append(values[-1])
            short = key.removeprefix("val/")
            row[short] = float(np.mean(finals)) if finals else None
            row[f"{short}/std"] = float(np.std(finals, ddof=1)) if len(finals) > 1 else (0.0 if finals else None)
            row[f"{short}/n"] = len(finals)
        rows.append(row)
    return rows


def format_accuracy_table(rows: Sequence[dict[str, Any]]) -> str:
    """The final-accuracy table as aligned text (mean ± SD over seeds, ddof=1)."""
    if not rows:
        return "(no runs)"
    metric_keys = list(dict.fromkeys(
        k for r in rows for k in r
        if k not in ("strategy", "seeds") and not k.endswith("/std") and not k.endswith("/n")
    ))
    header = ["strategy", "seeds"] + metric_keys
    table = [header]
    for r in rows:
        cells = [r["strategy"], str(r["seeds"])]
        for k in metric_keys:
            mean, std = r.get(k), r.get(f"{k}/std")
            cells.append("-" if mean is None or math.isnan(mean) else f"{mean:.3f} ± {std or 0:.3f}")
        table.append(cells)
    return aligned_table(table)


def aligned_table(table: Sequence[Sequence[str]]) -> str:
    """Rows of cells (the first row the header) as left-aligned text columns under a dashed rule."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _json_safe(x: Any) -> Any:
    """``x`` with every non-finite float (an F of a table without residual, a NaN metric) as None:
    strict JSON readers reject NaN and Infinity."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def results_plan(out_dir: str | Path, endpoint: str | None) -> tuple[Plan | None, str]:
    """The pre-registered plan of a results directory (its ``plan.json``, if any) and the primary
    endpoint: the plan's (an ``endpoint`` that contradicts it is a :class:`DataError`), else
    ``endpoint``, else ``final_accuracy``."""
    path = Path(out_dir) / PLAN_FILE
    plan = Plan.load(path) if path.is_file() else None
    if plan is not None and endpoint not in (None, plan.endpoint):
        raise DataError(f"{path}: the pre-registered primary endpoint is {plan.endpoint!r}, not {endpoint!r}")
    endpoint = plan.endpoint if plan is not None else endpoint or "final_accuracy"
    if endpoint not in ENDPOINTS:
        raise DataError(f"unknown endpoint {endpoint!r}; one of {sorted(ENDPOINTS)}")
    return plan, endpoint


def in_order(runs: Sequence[Run]) -> list[Run]:
    """``runs`` by strategy (registry order, as :func:`jaxdebate.sweep_runs.strategies`), then seed."""
    rank = {name: i for i, name in enumerate(strategies(runs))}
    return sorted(runs, key=lambda r: (rank[r.strategy], r.seed if r.seed is not None else -1))


def summarise(runs: Sequence[Run], endpoint: str = "final_accuracy", plan: Plan | None = None) -> dict[str, Any]:
    """``summary.json``'s content for ``runs`` (:func:`jaxdebate.sweep_stats.sweep_summary` over their
    rows, in :func:`in_order`): what the table, the report and the comparison plot all show."""
    return sweep_summary([run_summary(r) for r in in_order(runs)], endpoint, plan=plan)


def export_results(sweep_dir: str | Path, out_dir: str | Path, endpoint: str | None = None) -> dict[str, Any]:
    """Write a sweep's small artefacts (no checkpoints) to ``out_dir``: ``summary.json`` (``runs``,
    the per-strategy ``table``, the seed-level ``comparison`` on the primary endpoint and the
    ``secondary_endpoints``, the commit of the analysis), ``table.md``, ``answers.md``, every run's ``metrics.jsonl``,
    config and its first and last per-item validation files, and the PNG plots. A ``plan.json`` in
    ``out_dir`` fixes the design and the endpoint (:func:`results_plan`). Returns the summary."""
    plan, endpoint = results_plan(out_dir, endpoint)
    return write_results(load_sweep(sweep_dir), out_dir, endpoint, plan)


def write_results(runs: Sequence[Run], out_dir: str | Path, endpoint: str, plan: Plan | None) -> dict[str, Any]:
    """:func:`export_results` for runs already loaded (the CLI has them for its accuracy table)."""
    import shutil

    runs = in_order(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(runs, endpoint, plan)
    summary["analysed_by"] = {k: v for k, v in provenance().items() if k in ("commit", "dirty")}
    (out / "summary.json").write_text(json.dumps(_json_safe(summary), indent=2, allow_nan=False) + "\n")
    (out / "table.md").write_text(format_summary(summary))
    answered = profiles(runs)
    if answered:
        (out / ANSWERS_FILE).write_text(format_profiles(answered))
    for run in runs:
        dest = out / "runs" / run.name
        if dest.resolve() == run.workdir.resolve():  # re-analysing exported results in place
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_FILE, "config.json", "run.json"):
            if (run.workdir / name).is_file():
                shutil.copyfile(run.workdir / name, dest / name)
        item_files = validation_files.steps(run.workdir)  # the first and last per-item rows: what McNemar pairs
        for _, path in item_files[:1] + item_files[1:][-1:]:
            (dest / validation_files.DIR).mkdir(exist_ok=True)
            shutil.copyfile(path, dest / validation_files.DIR / path.name)
    write_plots(runs, out / "plots", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxdebate.analysis", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", help="directory with one run directory per strategy × seed")
    parser.add_argument("--out", default=None, help="where to write the PNG files (default SWEEP_DIR/plots)")
    parser.add_argument("--results", default=None,
                        help="also write the committable artefacts here (summary.json, table.md, metrics, plots)")
    parser.add_argument("--endpoint", default=None, choices=sorted(ENDPOINTS),
                        help="the primary endpoint of the comparison (default: the plan.json of --results if "
                             "it has one, else final single-agent accuracy; one that contradicts the plan is "
                             "refused)")
    args = parser.parse_args(argv)
    try:
        runs = load_sweep(args.sweep_dir)
        plan, endpoint = (results_plan(args.results, args.endpoint) if args.results
                          else (None, args.endpoint or "final_accuracy"))
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print(format_accuracy_table(final_accuracy_table(runs)))
    plots = Path(args.out) if args.out else Path(args.sweep_dir) / "plots"
    if args.results:
        summary = write_results(runs, args.results, endpoint, plan)
        print(format_summary(summary))
        print(f"wrote {args.results}")
        if plots.resolve() == (Path(args.results) / "plots").resolve():
            return 0  # write_results has just drawn them there
    else:
        summary = summarise(runs, endpoint, plan)
    for path in write_plots(runs, plots, summary):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

