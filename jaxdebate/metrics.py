"""Metric sinks: JSON Lines (always), TensorBoard event files, and Weights & Biases when configured.

Metrics are flat ``{name: number}`` dicts (nested dicts are flattened with ``/``), one ``write`` per
step; names such as ``train/reward/raw/agent_0`` become TensorBoard tags and W&B keys as they are.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.errors import ConfigError
from jaxdebate.jsonl import read_records

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_SUBDIR = "tensorboard"


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``; array scalars become Python numbers."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        else:
            out[name] = _scalar(value)
    return out


def _scalar(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"metric values must be scalars, got an array of shape {arr.shape}")
    item = arr.reshape(()).item()
    return item


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible as strings
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` (or of the run directory holding one), in order. A cut last line
    (a live run's record being written, or one a kill cut) is left out; a malformed line anywhere else
    is a DataError naming the file and line."""
    path = Path(path)
    return read_records(path / METRICS_FILE if path.is_dir() else path, live=True)


class MetricWriter:
    """Write step metrics to ``<directory>/metrics.jsonl``, TensorBoard and (optionally) W&B.

    ``truncate_after``: when resuming from a checkpoint at that step, records of later steps (logged
    by the interrupted run and about to be redone) are removed from the JSONL file first.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        wandb_mode: str = "offline",
        wandb_entity: str | None = None,
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        truncate_after: int | None = None,
    ) -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / METRICS_FILE
        if truncate_after is not None and self.path.exists():
            self._truncate(int(truncate_after))
        self._jsonl = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(logdir=str(self.directory / TENSORBOARD_SUBDIR), flush_secs=10)
        self._wandb = None
        if wandb_project:
            self._wandb = self._init_wandb(wandb_project, wandb_mode, wandb_entity, run_name, config)

    def _truncate(self, step: int) -> None:
        kept = [r for r in read_metrics(self.path) if int(r.get("step", -1)) <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for record in kept:
                f.write(json.dumps(record) + "\n")
        os.replace(tmp, self.path)

    def _init_wandb(self, project, mode, entity, run_name, config):
        if mode not in ("offline", "online", "disabled"):
            raise ConfigError(f"logging.wandb_mode must be offline, online or disabled, got {mode!r}")
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(
                "logging.wandb is on but the 'wandb' package is not installed: "
                "pip install 'jaxdebate[wandb]' (or set logging.wandb=false)"
            ) from e
        return wandb.init(
            project=project, entity=entity, name=run_name, mode=mode, dir=str(self.directory),
            config=dict(config) if config else None, resume="allow",
        )

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record ``metrics`` for ``step`` in every sink (and flush the JSONL line)."""
        flat = flatten(metrics)
        record = {"step": int(step), "time": time.time()}
        record.update({k: _json_number(v) for k, v in flat.items()})
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        numbers = {
            k: float(v) for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if self._tb is not None:
            for name, value in numbers.items():
                self._tb.add_scalar(name, value, global_step=int(step))
        if self._wandb is not None:
            self._wandb.log(numbers, step=int(step))

    def flush(self) -> None:
        self._jsonl.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if not self._jsonl.closed:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> MetricWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["METRICS_FILE", "MetricWriter", "flatten", "read_metrics"]
