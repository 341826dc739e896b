"""A run's per-item validation files, ``WORKDIR/validation/step_<N>.jsonl`` (one line per item and mode;
outside tools read them by this name): where they live, the fields every row holds, writing and reading.
The trainer writes them (:mod:`jaxdebate.rl.validation_plan`), the analysis reads them
(:mod:`jaxdebate.run_items`, :mod:`jaxdebate.answer_profile`); this module is the one place both agree on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxdebate import jsonl

DIR = "validation"
# what every row holds (:func:`jaxdebate.rl.validation.item_rows` adds the gold answer and each turn's)
ROW_FIELDS = ("id", "set", "mode", "answer", "correct_final")


def step_path(workdir: str | Path, step: int) -> Path:
    """``workdir/validation/step_<step>.jsonl``."""
    return Path(workdir) / DIR / f"step_{step}.jsonl"


def write(workdir: str | Path, step: int, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``step``'s rows, replacing the file whole (a resumed run rewrites its step); a row without
    :data:`ROW_FIELDS` is a ``ValueError`` and the step's file keeps what it held."""
    return jsonl.write_records(step_path(workdir, step), rows, required=ROW_FIELDS)


def read(path: str | Path) -> list[dict[str, Any]]:
    """The rows of one file; a line that is not a JSON object with :data:`ROW_FIELDS` is a
    :class:`~jaxdebate.errors.DataError` naming the file and line."""
    return jsonl.read_records(path, required=ROW_FIELDS)


def steps(workdir: str | Path) -> list[tuple[int, Path]]:
    """A run's files ``(step, path)`` by step; [] when it wrote none (runs before per-item validation)."""
    folder = Path(workdir) / DIR
    files = [(p.stem.removeprefix("step_"), p) for p in folder.glob("step_*.jsonl")] if folder.is_dir() else []
    return sorted((int(step), p) for step, p in files if step.isdigit())
