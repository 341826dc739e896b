"""Plots of a sweep (matplotlib; each function returns its figure, so a notebook displays it): training
reward, held-out accuracy and training signal over steps (mean over seeds with a band), and the
seed-level comparison on an endpoint; :func:`write_plots` writes them all as PNG files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.sweep_runs import VAL_AGENT_PREFIX, Run, aggregate, load_sweep, strategies
from jaxdebate.sweep_stats import VAL_DEBATE, VAL_DEBATE_HELDOUT, VAL_SINGLE, compare_strategies, run_summary

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
