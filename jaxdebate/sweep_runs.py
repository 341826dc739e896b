"""A sweep's runs as read from disk: one :class:`Run` per run directory (its metrics, sweep state and
config), the strategies in registry order, and a metric's mean and interval over seeds per strategy
(what the tables, the plots and the sweep's status read)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.metrics import METRICS_FILE, read_metrics
from jaxdebate.shaping import config_names
from jaxdebate.stats import t_quantile
from jaxdebate.run_endpoints import VAL_DEBATE, VAL_DEBATE_HELDOUT, metric_number

# Metric names written by the trainer (jaxdebate.train) beyond the endpoints run_endpoints reads.
VAL_ALL = "val/accuracy"
VAL_AGENT_PREFIX = "val/accuracy/agent_"


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
