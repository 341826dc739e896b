"""Plots of a sweep (matplotlib; each function returns its figure, so a notebook displays it): training
reward, held-out accuracy and training signal over steps (mean over seeds with a band), and the
seed-level comparison on an endpoint; :func:`write_plots` writes them all as PNG files."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.run_endpoints import VAL_DEBATE, VAL_DEBATE_HELDOUT, VAL_SINGLE
from jaxdebate.sweep_report import format_p
from jaxdebate.sweep_runs import VAL_AGENT_PREFIX, Run, aggregate
from jaxdebate.sweep_stats import EQUIVALENCE_MARGIN

# Metric names written by the trainer (jaxdebate.train) that the plots draw.
REWARD_RAW = "train/reward/raw/mean"
REWARD_SHAPED = "train/reward/shaped/mean"
ZERO_ADVANTAGE = "train/zero_advantage_fraction"
KL = "learner/kl"


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
                    colors: dict[str, str], margin: float | None = None):
    """Horizontal mean per entry (first on top) with its paired 95% interval (thick) and, where the
    entry has one, its simultaneous (Bonferroni) interval (thin), the one a ranking rests on; p and
    Holm's p sit under each name, so no label overlaps a bar; ``margin`` shades the equivalence band."""
    from matplotlib.ticker import MaxNLocator

    if margin is not None:
        ax.axvspan(-margin, margin, color="0.9", zorder=0, label=f"±{margin:.2f} (equivalence margin)")
    labels = []
    for y, e in enumerate(entries):
        mean, color = e[value], colors.get(e["strategy"], "k")
        test = "no test" if e.get("p") is None else f"p {format_p(e['p'])}, Holm {format_p(e.get('p_holm'))}"
        labels.append(f"{e['strategy']}\n{test}")
        if mean is None:
            continue
        for key, width in (("ci_simultaneous", 1.0), ("ci95", 3.5)):
            ci = e.get(key)
            if ci:
                ax.plot(ci, [y, y], color=color, lw=width, solid_capstyle="butt")
        ax.plot(mean, y, "o", color=color, markeredgecolor="k", markersize=6)
    ax.axvline(0, color="k", lw=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.set_yticks(range(len(entries)), labels, fontsize=7)
    ax.set_ylim(len(entries) - 0.5, -0.5)
    ax.set_xlabel(zero_label)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    if margin is not None:
        ax.legend(fontsize=7, loc="lower right")


def plot_comparison(summary: Mapping[str, Any]):
    """The seed-level comparison that ``summary`` holds (:func:`jaxdebate.sweep_stats.sweep_summary`,
    the content of ``summary.json``: its endpoint, runs, table and comparison, against its plan's arms
    when it has one): each complete block's values (a grey line per seed) with each strategy's mean and
    95% interval; each strategy minus the baseline on the same seed (paired 95% and simultaneous
    intervals, p and Holm's p, the equivalence margin); and each strategy's gain over step 0."""
    plt = _pyplot()
    endpoint, rows, comparison = summary["endpoint"], summary["runs"], summary["comparison"]
    baseline = comparison["baseline"]
    names = list(summary["plan"]["arms"]) if "plan" in summary else list(dict.fromkeys(r["strategy"] for r in rows))
    colors = {n: f"C{i}" for i, n in enumerate(names)}  # as in the curves
    complete = comparison["seeds_complete"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.2, 1, 1]})
    values = {(r["strategy"], r["seed"]): r[endpoint] for r in rows
              if r["seed"] in complete and r.get(endpoint) is not None}
    few = len(complete) <= 8  # a legend per seed only while it stays readable
    for j, seed in enumerate(complete):
        ys = [values[(n, seed)] for n in names]
        axes[0].plot(range(len(names)), ys, "-", color=f"C{j}" if few else "0.6", alpha=0.8 if few else 0.25,
                     lw=1.0, label=f"seed {seed}" if few else None)
    for t in summary["table"]:  # over the complete blocks
        if t["final_accuracy"] is None or t["strategy"] not in names:
            continue
        x = names.index(t["strategy"])
        if t["ci95"]:
            axes[0].plot([x, x], t["ci95"], color=colors[t["strategy"]], lw=3.5, solid_capstyle="butt")
        axes[0].plot(x, t["final_accuracy"], "o", color=colors[t["strategy"]], markeredgecolor="k", markersize=7)
    axes[0].set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    blocks = f"{len(complete)} complete seed block" + ("s" if len(complete) != 1 else "")
    axes[0].set_title(f"{endpoint}: {blocks} (a line each), mean ± 95% CI", fontsize=9)
    axes[0].grid(alpha=0.3)
    if few and complete:
        axes[0].legend(fontsize=7)
    b = comparison["blocked"]
    if b:
        axes[0].set_xlabel(f"blocked ANOVA: strategy F({b['strategy_df']}, {b['residual_df']}) = "
                           f"{b['strategy_F']:.2f}, p = {format_p(b['strategy_p'])}; seed p = {format_p(b['seed_p'])}",
                           fontsize=8)
    _interval_panel(axes[1], comparison["vs_baseline"], "mean_difference",
                    f"strategy − {baseline}, same seed: paired 95% CI (thick), simultaneous (thin)",
                    "difference in accuracy", colors, margin=EQUIVALENCE_MARGIN)
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


def write_plots(runs: Sequence[Run], out_dir: str | Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write every plot of a sweep's ``runs`` as PNG files in ``out_dir``: the curves, and the
    comparison that their ``summary`` (:func:`jaxdebate.analysis.summarise`) holds."""
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fn in PLOTS.items():
        fig = plot_comparison(summary) if fn is plot_comparison else fn(runs)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths
