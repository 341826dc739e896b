"""What a resumed run may change in its config, and the record of every change.

A workdir's ``config.json`` is the config its first step ran with and is never rewritten. Resuming
with a config that differs is refused (``RunError``, exit 2, the fields listed) unless every changed
field is in :data:`SAFE_ON_RESUME` (run length, cadences, logging, checkpoint retention, cluster
scheduling: nothing the learner computes with) or the user allows it explicitly
(``--allow-config-change``). Each change that goes ahead is appended to ``config_history.jsonl``:
the step it applies from, the fields (before -> after) and the full new config.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxdebate.configlib import diff, from_dict, to_dict
from jaxdebate.errors import ConfigError, RunError
from jaxdebate.jsonl import append_records, read_records
from jaxdebate.model.config import COMPUTE_FIELDS

CONFIG_FILE = "config.json"
HISTORY_FILE = "config_history.jsonl"
# field paths (or section prefixes ending in ".") whose change does not touch what a step computes
# (under a decaying learning-rate schedule, a new total_train_steps re-times the rest of the decay)
SAFE_ON_RESUME = (
    "training.total_train_steps", "training.validation_every_steps", "training.validate_at_start",
    "training.checkpoint_every_steps", "training.log_every_steps", "training.eval_batch_size",
    "training.nonfinite_patience", "checkpoint.", "logging.", "sampler.fallback",
    "launch.executor", "launch.partition", "launch.priority", "launch.qos", "launch.account",
    "launch.cpus_per_task", "launch.mem_gb", "launch.time_limit_minutes",
)
Change = tuple[str, Any, Any]  # (dotted path, before, after)


def is_safe(path: str) -> bool:
    return any(path == s or (s.endswith(".") and path.startswith(s)) for s in SAFE_ON_RESUME)


def changes(config: Any, saved: dict[str, Any]) -> list[Change]:
    """``[(path, before, after)]``: how ``config`` differs from a checkpoint's saved config dict
    (fields added to the code since the checkpoint take their defaults, so they never count)."""
    before = from_dict(type(config), saved)
    return [(path, b, a) for path, b, a in diff(before, config)]


def check_resume(config: Any, saved: dict[str, Any], step: int, *, allow: bool) -> list[Change]:
    """The changes to resume ``step`` with; RunError listing them when one is unsafe and not allowed."""
    found = changes(config, saved)
    unsafe = [c for c in found if not is_safe(c[0])]
    if unsafe and not allow:
        listed = "; ".join(f"{p}: {b!r} -> {a!r}" for p, b, a in unsafe)
        raise RunError(f"the config differs from the one step {step} was trained with ({listed}); resume "
                       f"with the original config, use another --workdir, or pass --allow-config-change "
                       f"to continue this run with the change recorded in {HISTORY_FILE}")
    return found


def check_model(saved: dict[str, Any] | None, now: dict[str, Any], step: int) -> None:
    """RunError when the model architecture (``LlamaConfig`` as a dict) differs from the one ``step``
    was saved with: never allowed, the checkpoint's arrays would not fit. How to compute
    (:data:`~jaxdebate.model.config.COMPUTE_FIELDS`: dtype, dot_dtype, remat) is a config change,
    which :func:`check_resume` governs. A checkpoint without the record (None) is not checked."""
    if saved is None:
        return
    now = {k: v for k, v in now.items() if k not in COMPUTE_FIELDS}
    saved = {k: v for k, v in saved.items() if k not in COMPUTE_FIELDS}
    changed = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(now) | set(saved))
               if saved.get(k) != now.get(k)]
    if changed:
        raise RunError(f"the model architecture differs from the one step {step} was trained with "
                       f"({'; '.join(changed)}); resume with the original model.source or use another --workdir")


def record(workdir: Path, config: Any, step: int, found: Sequence[Change]) -> None:
    """Write ``config.json`` when the run starts at step 0; append a history entry when it resumes
    ``step`` with ``found`` changes (``config.json`` then keeps what the earlier steps used)."""
    if step == 0:
        (workdir / CONFIG_FILE).write_text(json.dumps(to_dict(config), indent=2) + "\n")
    if found:
        entry = {"from_step": step, "time": time.time(),
                 "changed": [{"field": p, "before": b, "after": a} for p, b, a in found],
                 "config": to_dict(config)}
        append_records(workdir / HISTORY_FILE, [entry])


def last_config(workdir: Path | str) -> dict[str, Any] | None:
    """The config a run's latest steps ran with: its last history entry, else ``config.json``
    (``None`` before its first step); ConfigError naming the workdir when either is unreadable."""
    workdir = Path(workdir)
    try:
        entries = read_records(workdir / HISTORY_FILE) if (workdir / HISTORY_FILE).is_file() else []
        if entries:
            return entries[-1]["config"]
        path = workdir / CONFIG_FILE
        return json.loads(path.read_text()) if path.is_file() else None
    except (ValueError, KeyError) as e:
        raise ConfigError(f"{workdir}: unreadable {HISTORY_FILE} or {CONFIG_FILE} ({e}); cannot tell what the "
                          f"run ran") from None
