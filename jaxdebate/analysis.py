"""Compare strategies across a sweep: curves (mean over seeds with a t 95% band or ±1 SD, ddof=1),
the final-accuracy table, the seed-level comparison (:mod:`jaxdebate.sweep_stats`), PNG plots.

    python -m jaxdebate.analysis runs/sweep --out runs/sweep/plots
    python -m jaxdebate.analysis runs/arithmetic --results results/arithmetic   # committable artefacts
    python -m jaxdebate.analysis runs/sweep --results results/x --endpoint final_debate_accuracy

A sweep directory holds one workdir per run (``<strategy>-seed<seed>``, each with ``metrics.jsonl``);
:mod:`jaxdebate.sweep` makes them, but any directories of runs laid out that way work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate import validation_files
from jaxdebate.answer_profile import format_profiles, profiles
from jaxdebate.errors import DataError
from jaxdebate.metrics import METRICS_FILE, read_metrics
from jaxdebate.provenance import provenance
from jaxdebate.run_items import run_item_tests  # noqa: F401  (notebook API)
from jaxdebate.shaping import config_names
from jaxdebate.stats import t_quantile
from jaxdebate.sweep_report import format_summary
from jaxdebate.sweep_stats import (  # noqa: F401  (run_summary, sweep_summary: the notebook's API too)
    ENDPOINTS,
    INITIAL,
    VAL_DEBATE,
    VAL_DEBATE_HELDOUT,
    VAL_SINGLE,
    Plan,
    compare_strategies,
    metric_number,
    run_summary,
    sweep_summary,
)

# Metric names written by the trainer (jaxdebate.train) that the comparison plots use.
REWARD_RAW = "train/reward/raw/mean"
REWARD_SHAPED = "train/reward/shaped/mean"
ZERO_ADVANTAGE = "train/zero_advantage_fraction"
KL = "learner/kl"
VAL_AGENT_PREFIX = "val/accuracy/agent_"
ANSWERS_FILE = "answers.md"  # what each run answered at its last validation (jaxdebate.answer_profile)
PLAN_FILE = "plan.json"  # a results directory's pre-registered design (sweep_stats.Plan)
VAL_ALL = "val/accuracy"


@dataclasses.dataclass
class Run:
    """One run of a sweep: its name, strategy, seed, directory, metric records, sweep state (``run.json``)
    and experiment config (``config.json``; {} when absent or unreadable)."""

    name: str
    strategy: str
    seed: int | None
    workdir: Path
    records: list[dict[str, Any]]
    state: dict[str, Any]
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of one metric over the run (records without it are skipped)."""
        points = [(r["step"], metric_number(r[key])) for r in self.records if key in r and "step" in r]
        points = [(s, v) for s, v in points if v is not None]
        if not points:
            return np.zeros(0, dtype=int), np.zeros(0)
        steps, values = zip(*points)
        return np.asarray(steps, dtype=int), np.asarray(values, dtype=float)

    def keys(self) -> set[str]:
        return {k for r in self.records for k in r}


def _split_name(name: str) -> tuple[str, int | None]:
    strategy, sep, seed = name.rpartition("-seed")
    if sep and seed.isdigit():
        return strategy, int(seed)
    return name, None


def load_run(workdir: str | Path) -> Run:
    """One run directory (``metrics.jsonl``, ``config.json`` and, when made by the sweep, ``run.json``)."""
    workdir = Path(workdir)
    state_path = workdir / "run.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    name = state.get("name", workdir.name)
    strategy, seed = _split_name(name)
    if state.get("seed") is not None:
        seed = int(state["seed"])
    records = read_metrics(workdir) if (workdir / METRICS_FILE).is_file() else []
    try:
        config = json.loads((workdir / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        config = {}
    return Run(name, strategy, seed, workdir, records, state, config)


def load_sweep(sweep_dir: str | Path) -> list[Run]:
    """Every run under ``sweep_dir`` (directories holding a metrics.jsonl or a run.json), sorted."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep directory not found: {sweep_dir}")
    runs = [
        load_run(d) for d in sorted(sweep_dir.iterdir())
        if d.is_dir() and ((d / METRICS_FILE).is_file() or (d / "run.json").is_file())
    ]
    if not runs:
        raise FileNotFoundError(f"no runs (directories with {METRICS_FILE}) under {sweep_dir}")
    return runs


def final_metrics(workdir: str | Path) -> dict[str, Any]:
    """The last logged step and the last validation debate accuracy of one run ({} if none yet): the
    held-out debate's (``val/debate/...``) when the run validated both modes, else the only one."""
    path = Path(workdir) / METRICS_FILE
    if not path.is_file():
        return {}
    records = read_metrics(path)
    out: dict[str, Any] = {"step": max((r.get("step", 0) for r in records), default=None)}
    key = VAL_DEBATE_HELDOUT if any(VAL_DEBATE_HELDOUT in r for r in records) else VAL_DEBATE
    for r in reversed(records):
        value = metric_number(r.get(key))
        if value is not None:
            out["accuracy"] = value
            out["accuracy_step"] = r.get("step")
            break
    return out


def strategies(runs: Sequence[Run]) -> list[str]:
    """Strategy names (run-name stems): the registered strategies in registry (DESIGN) order, then
    any others as first seen."""
    names = list(dict.fromkeys(r.strategy for r in runs))
    rank = {name: i for i, name in enumerate(config_names())}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), names.index(n)))


def aggregate(runs: Sequence[Run], key: str) -> dict[str, dict[str, np.ndarray]]:
    """Per strategy: ``steps``, ``mean``, ``std`` (ddof=1), ``ci95`` (half-width of the t 95%
    interval of the mean) and ``n`` (seeds with a value) of one metric.

    Steps are the union over seeds; at each step the statistics are over the seeds that logged it
    (spread and interval 0 where fewer than two did).
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for strategy in strategies(runs):
        per_seed = [r.series(key) for r in runs if r.strategy == strategy]
        per_seed = [(s, v) for s, v in per_seed if np.any(np.isfinite(v))]  # NaN: an agent never played
        if not per_seed:
            continue
        steps = np.unique(np.concatenate([s for s, _ in per_seed]))
        table = np.full((len(per_seed), len(steps)), np.nan)
        for i, (s, v) in enumerate(per_seed):
            table[i, np.searchsorted(steps, s)] = v
        n = np.sum(~np.isnan(table), axis=0)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # steps no seed logged: NaN, said by n == 0
            mean = np.nanmean(table, axis=0)
            std = np.where(n > 1, np.nanstd(table, axis=0, ddof=1), 0.0)
        t = np.array([t_quantile(0.975, k - 1) if k > 1 else 0.0 for k in n])
        ci95 = t * std / np.sqrt(np.maximum(n, 1))
        out[strategy] = {"steps": steps, "mean": mean, "std": std, "ci95": ci95, "n": n}
    return out


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


# ---------------------------------------------------------------------------------------------------
# Plots (matplotlib; each function returns the figure so notebooks display it)
# ---------------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and matplotlib.get_backend().lower() not in (
        "module://matplotlib_inline.backend_inline",
    ):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt



def plot_metric(runs: Sequence[Run], key: str, *, ax=None, title: str | None = None, linestyle: str = "-",
                label_suffix: str = "", band: str = "sd"):
    """One metric over training steps, one line per strategy (mean over seeds; band ``"sd"``: ±1 SD,
    ddof=1, or ``"ci95"``: the t 95% interval of the mean)."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    curves = aggregate(runs, key)
    for i, (strategy, c) in enumerate(curves.items()):
        color = f"C{i}"
        ax.plot(c["steps"], c["mean"], linestyle, color=color, marker="o", markersize=3,
                label=f"{strategy}{label_suffix}")
        if np.any(c["n"] > 1):
            half = c["ci95"] if band == "ci95" else c["std"]
            ax.fill_between(c["steps"], c["mean"] - half, c["mean"] + half, color=color, alpha=0.15)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title or key)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, f"no data for {key}", ha="center", va="center", transform=ax.transAxes)
    return ax.figure


def _two_panels(runs: Sequence[Run], left: tuple[str, str], right: tuple[str, str]):
    """A figure of two :func:`plot_metric` panels, each ``(metric key, title)``."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (key, title) in zip(axes, (left, right)):
        plot_metric(runs, key, ax=ax, title=f"{title}, mean ± SD over seeds")
    fig.tight_layout()
    return fig


def plot_rewards(runs: Sequence[Run]):
    """Training reward per strategy: raw correctness (left) and shaped reward (right)."""
    return _two_panels(runs, (REWARD_RAW, "training reward (raw correctness)"),
                       (REWARD_SHAPED, "training reward (shaped)"))


def plot_validation(runs: Sequence[Run]):
    """Held-out accuracy per strategy, mean with its t 95% interval over seeds: the debate (left) and
    the single agent (right) when validation ran both modes; else the debate plurality (left) and
    each agent (right, ±1 SD)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    keys = {k for r in runs for k in r.keys()}
    if VAL_DEBATE_HELDOUT in keys or VAL_SINGLE in keys:
        plot_metric(runs, VAL_DEBATE_HELDOUT, ax=left, band="ci95",
                    title="held-out debate accuracy, mean ± 95% CI over seeds")
        plot_metric(runs, VAL_SINGLE, ax=right, band="ci95",
                    title="held-out single-agent accuracy, mean ± 95% CI over seeds")
        fig.tight_layout()
        return fig
    plot_metric(runs, VAL_DEBATE, ax=left, band="ci95",
                title="held-out accuracy (debate plurality / one agent), mean ± 95% CI")
    agent_keys = sorted(k for k in keys if k.startswith(VAL_AGENT_PREFIX) and aggregate(runs, k))
    styles = ["-", "--", ":", "-."]
    curves_drawn = bool(agent_keys)
    for j, key in enumerate(agent_keys):
        plot_metric(runs, key, ax=right, linestyle=styles[j % len(styles)],
                    label_suffix=f" / agent {key.removeprefix(VAL_AGENT_PREFIX)}",
                    title="validation accuracy per agent, mean ± SD")
    if not curves_drawn:
        plot_metric(runs, f"{VAL_AGENT_PREFIX}0", ax=right, title="validation accuracy per agent")
    fig.tight_layout()
    return fig


def plot_training_signal(runs: Sequence[Run]):
    """Zero-advantage fraction (groups filtered for carrying no signal) and KL to the reference."""
    return _two_panels(runs, (ZERO_ADVANTAGE, "zero-advantage fraction"), (KL, "KL to reference (k3)"))


def _interval_panel(ax, entries: Sequence[dict[str, Any]], value: str, title: str, zero_label: str,
                    colors: dict[str, str]):
    """Horizontal mean ± paired 95% interval per entry (first on top), annotated with p and Holm's p."""
    for y, e in enumerate(entries):
        mean, ci, color = e[value], e.get("ci95"), colors.get(e["strategy"], "k")
        if mean is None:
            continue
        if ci:
            ax.errorbar(mean, y, xerr=[[mean - ci[0]], [ci[1] - mean]], fmt="o", color=color, capsize=4)
        else:
            ax.plot(mean, y, "o", color=color)
        note = "one seed" if e.get("p") is None else f"p={e['p']:.2g}, Holm p={e['p_holm']:.2g}"
        ax.annotate(note, (mean, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(entries)), [e["strategy"] for e in entries], fontsize=8)
    ax.set_ylim(len(entries) - 0.4, -0.6)
    ax.set_xlabel(zero_label)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def plot_comparison(runs: Sequence[Run], endpoint: str = "final_accuracy", baseline: str = "identity"):
    """The seed-level comparison on ``endpoint``: each seed's value per strategy (a line per seed:
    the block), each strategy minus ``baseline`` on the same seed (paired 95% CI, p and Holm's p),
    and each strategy's gain over step 0 (paired over seeds)."""
    plt = _pyplot()
    names = strategies(runs)
    colors = {n: f"C{i}" for i, n in enumerate(names)}  # as in the curves
    rows = [run_summary(r) for r in sorted(runs, key=lambda r: names.index(r.strategy))]
    comparison = compare_strategies(rows, baseline, endpoint)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    seeds = sorted({r["seed"] for r in rows if r.get(endpoint) is not None}, key=lambda k: (k is None, k))
    for j, seed in enumerate(seeds):
        by = {r["strategy"]: r[endpoint] for r in rows if r["seed"] == seed and r.get(endpoint) is not None}
        xs = [i for i, n in enumerate(names) if n in by]
        axes[0].plot(xs, [by[names[i]] for i in xs], "o-", color=f"C{j}", alpha=0.8, label=f"seed {seed}")
    axes[0].set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    axes[0].set_title(f"{endpoint} per seed (a seed fixes data order and sampling)", fontsize=9)
    axes[0].grid(alpha=0.3)
    if seeds:
        axes[0].legend(fontsize=7)
    b = comparison["blocked"]
    if b:
        axes[0].set_xlabel(f"blocked ANOVA: strategy p={b['strategy_p']:.2g}, seed p={b['seed_p']:.2g}", fontsize=8)
    _interval_panel(axes[1], comparison["vs_baseline"], "mean_difference",
                    f"strategy − {baseline}, same seed (paired 95% CI)", "difference in accuracy", colors)
    if comparison["learning"]:
        _interval_panel(axes[2], comparison["learning"], "mean_gain",
                        "final − step 0, same seed (paired 95% CI)", "gain in accuracy", colors)
    else:
        axes[2].text(0.5, 0.5, f"no step-0 value for {endpoint}", ha="center", va="center",
                     transform=axes[2].transAxes)
    fig.tight_layout()
    return fig


PLOTS = {
    "rewards.png": plot_rewards,
    "validation_accuracy.png": plot_validation,
    "training_signal.png": plot_training_signal,
    "comparison.png": plot_comparison,
}


def write_plots(sweep_dir: str | Path, out_dir: str | Path | None = None,
                endpoint: str = "final_accuracy") -> list[Path]:
    """Write every comparison plot of a sweep as PNG files (default ``<sweep_dir>/plots``)."""
    plt = _pyplot()
    runs = load_sweep(sweep_dir)
    out = Path(out_dir) if out_dir else Path(sweep_dir) / "plots"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fn in PLOTS.items():
        fig = plot_comparison(runs, endpoint) if fn is plot_comparison else fn(runs)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths


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


def export_results(sweep_dir: str | Path, out_dir: str | Path, endpoint: str | None = None) -> Path:
    """Write a sweep's small artefacts (no checkpoints) to ``out_dir``: ``summary.json`` (``runs``,
    the per-strategy ``table``, the seed-level ``comparison`` on the primary endpoint and the
    ``secondary_endpoints``, the commit of the analysis), ``table.md``, ``answers.md``, every run's ``metrics.jsonl``,
    config and its first and last per-item validation files, and the PNG plots. A ``plan.json`` in
    ``out_dir`` fixes the design and the endpoint (:func:`results_plan`)."""
    import shutil

    plan, endpoint = results_plan(out_dir, endpoint)
    runs = load_sweep(sweep_dir)
    rank = {name: i for i, name in enumerate(strategies(runs))}
    runs = sorted(runs, key=lambda r: (rank[r.strategy], r.seed if r.seed is not None else -1))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = sweep_summary([run_summary(r) for r in runs], endpoint, plan=plan)
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
    write_plots(sweep_dir, out / "plots", endpoint)
    return out


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
        endpoint = results_plan(args.results, args.endpoint)[1] if args.results else args.endpoint or "final_accuracy"
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print(format_accuracy_table(final_accuracy_table(runs)))
    for path in write_plots(args.sweep_dir, args.out, endpoint):
        print(f"wrote {path}")
    if args.results:
        out = export_results(args.sweep_dir, args.results, endpoint)
        print((out / "table.md").read_text())
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

