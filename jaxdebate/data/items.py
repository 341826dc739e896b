"""The one record every dataset is mapped to: ``Item(id, problem, answer, env, meta)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jaxdebate.errors import DataError
from jaxdebate.jsonl import write_records


@dataclasses.dataclass(frozen=True)
class Item:
    """One problem: a stable ``id``, the ``problem`` text, the gold ``answer`` (a LaTeX/number string),
    the environment that plays it (``env``, e.g. ``"math"``) and source-specific ``meta`` (subject,
    level, worked solution, original indices...). ``meta`` holds plain JSON types. ``origin`` says
    where the item was read (``file.jsonl:12``) for error messages; it is not part of the record."""

    id: str
    problem: str
    answer: str
    env: str = "math"
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    origin: str = dataclasses.field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("id", "problem", "answer", "env"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise DataError(f"Item.{name} must be a string, got {type(value).__name__} ({value!r:.60})")
        if not self.id:
            raise DataError("Item.id must not be empty")
        if not self.problem.strip():
            raise DataError(f"item {self.id!r}: empty problem")
        if not self.answer.strip():
            raise DataError(f"item {self.id!r}: empty answer")
        if not self.env:
            raise DataError(f"item {self.id!r}: empty env name")
        if not isinstance(self.meta, Mapping):
            raise DataError(f"item {self.id!r}: meta must be a mapping, got {type(self.meta).__name__}")
        object.__setattr__(self, "meta", dict(self.meta))

    def with_env(self, env: str) -> Item:
        """The same item routed to another environment."""
        return dataclasses.replace(self, env=env)

    @property
    def where(self) -> str:
        """``file:line (item 'id')`` when the item came from a file, else ``item 'id'``."""
        return f"{self.origin} (item {self.id!r})" if self.origin else f"item {self.id!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "problem": self.problem, "answer": self.answer, "env": self.env,
                "meta": dict(self.meta)}


def write_jsonl(items: Iterable[Item], path: str | Path) -> Path:
    """Write items in jaxdebate's own JSONL format (``load_items`` reads it back unchanged)."""
    return write_records(path, (item.to_dict() for item in items))
