"""Compare strategies across a sweep: curves (mean ± std over seeds), final-accuracy table, PNG plots.

    python -m jaxdebate.analysis runs/sweep --out runs/sweep/plots
    python -m jaxdebate.analysis runs/arithmetic --results results/arithmetic   # committable artefacts

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

from jaxdebate.metrics import METRICS_FILE, read_metrics
from jaxdebate.shaping import config_names
from jaxdebate.stats import permutation_anova, t_interval, two_proportion_test, wilson_interval

# Metric names written by the trainer (jaxdebate.rl.trainer) that the comparison plots use.
REWARD_RAW = "train/reward/raw/mean"
REWARD_SHAPED = "train/reward/shaped/mean"
ZERO_ADVANTAGE = "train/zero_advantage_fraction"
KL = "learner/kl"
VAL_DEBATE = "val/accuracy/debate"
VAL_AGENT_PREFIX = "val/accuracy/agent_"
VAL_ALL = "val/accuracy"


@dataclasses.dataclass
class Run:
    """One run of a sweep: its name, strategy, seed, directory and metric records."""

    name: str
    strategy: str
    seed: int | None
    workdir: Path
    records: list[dict[str, Any]]
    state: dict[str, Any]

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of one metric over the run (records without it are skipped)."""
        points = [(r["step"], _number(r[key])) for r in self.records if key in r and "step" in r]
        points = [(s, v) for s, v in points if v is not None]
        if not points:
            return np.zeros(0, dtype=int), np.zeros(0)
        steps, values = zip(*points)
        return np.asarray(steps, dtype=int), np.asarray(values, dtype=float)

    def keys(self) -> set[str]:
        return {k for r in self.records for k in r}


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    try:  # NaN/inf are stored as strings
        return float(x)
    except (TypeError, ValueError):
        return None


def _split_name(name: str) -> tuple[str, int | None]:
    strategy, sep, seed = name.rpartition("-seed")
    if sep and seed.isdigit():
        return strategy, int(seed)
    return name, None


def load_run(workdir: str | Path) -> Run:
    """One run directory (``metrics.jsonl`` and, when made by the sweep, ``run.json``)."""
    workdir = Path(workdir)
    state_path = workdir / "run.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    name = state.get("name", workdir.name)
    strategy, seed = _split_name(name)
    if state.get("seed") is not None:
        seed = int(state["seed"])
    records = read_metrics(workdir) if (workdir / METRICS_FILE).is_file() else []
    return Run(name, strategy, seed, workdir, records, state)


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
    """The last logged step and the last validation debate accuracy of one run ({} if none yet)."""
    path = Path(workdir) / METRICS_FILE
    if not path.is_file():
        return {}
    records = read_metrics(path)
    out: dict[str, Any] = {"step": max((r.get("step", 0) for r in records), default=None)}
    for r in reversed(records):
        value = _number(r.get(VAL_DEBATE))
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
    """Per strategy: ``steps``, ``mean``, ``std`` and ``n`` (seeds with a value) of one metric.

    Steps are the union over seeds; at each step the mean/std are over the seeds that logged it.
    """
    out: dict[str, dict[str, np.ndarray]] = {}
    for strategy in strategies(runs):
        per_seed = [r.series(key) for r in runs if r.strategy == strategy]
        per_seed = [(s, v) for s, v in per_seed if len(s)]
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
            std = np.where(n > 1, np.nanstd(table, axis=0), 0.0)
        out[strategy] = {"steps": steps, "mean": mean, "std": std, "n": n}
    return out


def final_accuracy_table(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per strategy: final validation accuracy (debate plurality, each agent, all turns), mean and
    std over seeds, with the number of seeds that reached a validation."""
    rows = []
    for strategy in strategies(runs):
        members = [r for r in runs if r.strategy == strategy]
        row: dict[str, Any] = {"strategy": strategy, "seeds": len(members)}
        keys = [VAL_DEBATE, VAL_ALL] + sorted(
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
            row[f"{short}/std"] = float(np.std(finals)) if len(finals) > 1 else (0.0 if finals else None)
            row[f"{short}/n"] = len(finals)
        rows.append(row)
    return rows


def format_accuracy_table(rows: Sequence[dict[str, Any]]) -> str:
    """The final-accuracy table as aligned text (mean ± std over seeds)."""
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
                label_suffix: str = ""):
    """One metric over training steps, one line per strategy (mean over seeds, band = ±1 std)."""
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
            ax.fill_between(c["steps"], c["mean"] - c["std"], c["mean"] + c["std"], color=color, alpha=0.15)
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
        plot_metric(runs, key, ax=ax, title=title)
    fig.tight_layout()
    return fig


def plot_rewards(runs: Sequence[Run]):
    """Training reward per strategy: raw correctness (left) and shaped reward (right)."""
    return _two_panels(runs, (REWARD_RAW, "training reward (raw correctness)"),
                       (REWARD_SHAPED, "training reward (shaped)"))


def plot_validation(runs: Sequence[Run]):
    """Validation accuracy per strategy: debate plurality (left) and each agent (right)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    plot_metric(runs, VAL_DEBATE, ax=left, title="validation accuracy (debate plurality)")
    agent_keys = sorted({k for r in runs for k in r.keys() if k.startswith(VAL_AGENT_PREFIX)})
    styles = ["-", "--", ":", "-."]
    curves_drawn = False
    for j, key in enumerate(agent_keys):
        if aggregate(runs, key):
            curves_drawn = True
        plot_metric(runs, key, ax=right, linestyle=styles[j % len(styles)],
                    label_suffix=f" / agent {key.removeprefix(VAL_AGENT_PREFIX)}",
                    title="validation accuracy per agent")
    if not curves_drawn:
        plot_metric(runs, f"{VAL_AGENT_PREFIX}0", ax=right, title="validation accuracy per agent")
    fig.tight_layout()
    return fig


def plot_training_signal(runs: Sequence[Run]):
    """Zero-advantage fraction (groups filtered for carrying no signal) and KL to the reference."""
    return _two_panels(runs, (ZERO_ADVANTAGE, "zero-advantage fraction"), (KL, "KL to reference (k3)"))


PLOTS = {
    "rewards.png": plot_rewards,
    "validation_accuracy.png": plot_validation,
    "training_signal.png": plot_training_signal,
}


def write_plots(sweep_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write every comparison plot of a sweep as PNG files (default ``<sweep_dir>/plots``)."""
    plt = _pyplot()
    runs = load_sweep(sweep_dir)
    out = Path(out_dir) if out_dir else Path(sweep_dir) / "plots"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fn in PLOTS.items():
        fig = fn(runs)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths


# t quantiles (two-sided 95%) for the seed-level interval of a strategy's mean


def run_summary(run: Run) -> dict[str, Any]:
    """One run's row of ``summary.json``: held-out accuracy at the first and last validation (with
    the items counted and a two-proportion test between them), steps, status and wall time."""

    steps, values = run.series(VAL_DEBATE)
    items = [_number(r.get("val/items")) for r in run.records if VAL_DEBATE in r]
    last_step = max((r.get("step", 0) for r in run.records), default=0)
    row: dict[str, Any] = {
        "strategy": run.strategy, "seed": run.seed, "status": run.state.get("status", "unknown"),
        "steps": int(last_step), "wall_time_s": run.state.get("wall_time_s"),
        "step_time_s": _step_time(run.records),
        "no_update_steps": _no_update_steps(run.records),
        "initial_accuracy": float(values[0]) if len(values) and steps[0] == 0 else None,
        "final_accuracy": float(values[-1]) if len(values) and steps[-1] > 0 else None,
        "final_step": int(steps[-1]) if len(values) else None,
        "validation_items": int(items[-1]) if items and items[-1] else None,
    }
    n = row["validation_items"]
    if n and row["initial_accuracy"] is not None and row["final_accuracy"] is not None:
        k0, k1 = round(row["initial_accuracy"] * n), round(row["final_accuracy"] * n)
        row["initial_ci95"], row["final_ci95"] = list(wilson_interval(k0, n)), list(wilson_interval(k1, n))
        row["z"], row["p_two_proportion"] = two_proportion_test(k0, n, k1, n)
    return row


def _step_time(records: Sequence[dict[str, Any]]) -> float | None:
    """The sum of ``time/step`` over a run's steps (the last record of each step counts): its
    training time, which unlike the sweep's wall clock survives a killed and resumed attempt."""
    last = {r["step"]: _number(r.get("time/step")) for r in records if "step" in r and "time/step" in r}
    times = [t for t in last.values() if t is not None]
    return float(sum(times)) if times else None


def _no_update_steps(records: Sequence[dict[str, Any]]) -> int:
    """Steps whose every group was filtered (zero signal or truncated): the policy did not move."""
    last = {r["step"]: r for r in records if "step" in r and "train/n_kept" in r}
    return sum(1 for r in last.values() if _number(r.get("train/n_kept")) == 0)


def strategy_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy over its finished seeds: final held-out accuracy mean with a t 95% interval over
    seeds, the mean gain over the initial accuracy, and the mean training time (sum of step times)."""
    out = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        done = [r for r in rows if r["strategy"] == strategy and r["final_accuracy"] is not None]
        finals = np.array([r["final_accuracy"] for r in done])
        gains = np.array([r["final_accuracy"] - r["initial_accuracy"] for r in done
                          if r["initial_accuracy"] is not None])
        walls = [r["step_time_s"] for r in done if r.get("step_time_s")]
        entry: dict[str, Any] = {"strategy": strategy, "seeds": len(done), "final_accuracy": None, "ci95": None,
                                 "gain": float(gains.mean()) if len(gains) else None,
                                 "train_time_min": float(np.mean(walls)) / 60 if walls else None}
        if len(finals):
            interval = t_interval(finals.tolist())
            entry.update(final_accuracy=float(finals.mean()), ci95=list(interval) if interval else None)
        out.append(entry)
    return out


def compare_strategies(rows: Sequence[dict[str, Any]], baseline: str = "identity") -> dict[str, Any]:
    """Do the strategies differ? Over the finished runs' final held-out accuracies: a permutation
    one-way ANOVA across strategies, and each strategy minus ``baseline`` on the same seeds (same
    data order and sampling seeds, so paired) with a t 95% interval of the mean difference."""
    finals: dict[str, dict[int, float]] = {}
    for r in rows:
        if r["final_accuracy"] is not None:
            finals.setdefault(r["strategy"], {})[r["seed"]] = r["final_accuracy"]
    out: dict[str, Any] = {"baseline": baseline, "anova_f": None, "anova_permutation_p": None, "vs_baseline": []}
    groups = [list(v.values()) for v in finals.values() if v]
    if len(groups) >= 2 and sum(map(len, groups)) > len(groups):
        out["anova_f"], out["anova_permutation_p"] = permutation_anova(groups)
    base = finals.get(baseline, {})
    for strategy, by_seed in finals.items():
        if strategy == baseline:
            continue
        seeds = sorted(set(by_seed) & set(base))
        diffs = [by_seed[k] - base[k] for k in seeds]
        interval = t_interval(diffs)
        out["vs_baseline"].append({
            "strategy": strategy, "seeds": seeds, "mean_difference": float(np.mean(diffs)) if diffs else None,
            "ci95": list(interval) if interval else None,
        })
    return out


def format_comparison(comparison: dict[str, Any]) -> str:
    """The comparison as markdown: the ANOVA line and the paired differences to the baseline."""
    p = comparison["anova_permutation_p"]
    lines = [f"Across strategies (permutation one-way ANOVA on final accuracy): "
             + ("n/a" if p is None else f"F = {comparison['anova_f']:.2f}, p = {p:.3f}"), "",
             f"| strategy − {comparison['baseline']} (same seed) | seeds | mean difference | 95% CI |",
             "|---|---|---|---|"]
    for c in comparison["vs_baseline"]:
        diff = "-" if c["mean_difference"] is None else f"{c['mean_difference']:+.3f}"
        ci = "-" if not c["ci95"] else f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]"
        lines.append(f"| {c['strategy']} | {len(c['seeds'])} | {diff} | {ci} |")
    return "\n".join(lines)


def format_strategy_table(table: Sequence[dict[str, Any]]) -> str:
    """The strategy table as markdown."""
    lines = ["| strategy | seeds | final held-out accuracy (mean) | 95% CI over seeds | gain vs step 0 | step time / run |",
             "|---|---|---|---|---|---|"]
    for t in table:
        acc = "-" if t["final_accuracy"] is None else f"{t['final_accuracy']:.3f}"
        ci = "-" if not t["ci95"] else f"[{t['ci95'][0]:.3f}, {t['ci95'][1]:.3f}]"
        gain = "-" if t["gain"] is None else f"{t['gain']:+.3f}"
        wall = "-" if t["train_time_min"] is None else f"{t['train_time_min']:.1f} min"
        lines.append(f"| {t['strategy']} | {t['seeds']} | {acc} | {ci} | {gain} | {wall} |")
    return "\n".join(lines)


def export_results(sweep_dir: str | Path, out_dir: str | Path) -> Path:
    """Write a sweep's small artefacts (no checkpoints) to ``out_dir``: ``summary.json`` (``runs``,
    the per-strategy ``table`` and the ``comparison`` of strategies), ``table.md``, every run's ``metrics.jsonl`` and config, and the
    PNG plots."""
    import shutil

    runs = load_sweep(sweep_dir)
    rank = {name: i for i, name in enumerate(strategies(runs))}
    runs = sorted(runs, key=lambda r: (rank[r.strategy], r.seed if r.seed is not None else -1))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_summary(r) for r in runs]
    table = strategy_table(rows)
    comparison = compare_strategies(rows)
    (out / "summary.json").write_text(
        json.dumps({"runs": rows, "table": table, "comparison": comparison}, indent=2) + "\n")
    (out / "table.md").write_text(format_strategy_table(table) + "\n\n" + format_comparison(comparison) + "\n")
    for run in runs:
        dest = out / "runs" / run.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_FILE, "config.json", "run.json"):
            if (run.workdir / name).is_file():
                shutil.copyfile(run.workdir / name, dest / name)
    write_plots(sweep_dir, out / "plots")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxdebate.analysis", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", help="directory with one run directory per strategy × seed")
    parser.add_argument("--out", default=None, help="where to write the PNG files (default SWEEP_DIR/plots)")
    parser.add_argument("--results", default=None,
                        help="also write the committable artefacts here (summary.json, table.md, metrics, plots)")
    args = parser.parse_args(argv)
    try:
        runs = load_sweep(args.sweep_dir)
    except (FileNotFoundError, ValueError) as e:
        print(f"analysis: {e}", file=sys.stderr)
        return 2
    print(format_accuracy_table(final_accuracy_table(runs)))
    for path in write_plots(args.sweep_dir, args.out):
        print(f"wrote {path}")
    if args.results:
        out = export_results(args.sweep_dir, args.results)
        summary = json.loads((out / "summary.json").read_text())
        print(format_strategy_table(summary["table"]))
        print(format_comparison(summary["comparison"]))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def __getattr__(name: str) -> Any:
    """``analysis.sample_transcript`` (its old home) still works: it samples a live debate from a
    checkpoint, which is not analysis of logged metrics, so it lives in :mod:`jaxdebate.transcripts`."""
    if name == "sample_transcript":
        from jaxdebate.transcripts import sample_transcript

        return sample_transcript
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

