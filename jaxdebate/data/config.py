"""The ``data`` section of an experiment config: which items to train and validate on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from jaxdebate.configlib import Section
from jaxdebate.data import readers
from jaxdebate.data.items import Item
from jaxdebate.data.sources import load_items
from jaxdebate.data.stream import split_holdout
from jaxdebate.errors import DataError


def _default_remap() -> dict[str, str]:
    return {"math": "math_debate"}


@dataclasses.dataclass(frozen=True)
class DataConfig(Section):
    """``train``/``validation``: dataset names or JSONL paths (see :func:`load_items`). With
    ``validation=None``, ``validation_size`` items are held out of ``train`` (chosen by
    ``holdout_seed``); otherwise at most ``validation_size`` items are read from ``validation``.
    ``env_name_remap`` routes items to environments (``{"math": "math_debate"}`` turns single-agent
    items into debates). ``validation_env`` plays every validation item in that environment instead
    (``"math"``: one agent, one round, e.g. to measure the policy's own held-out accuracy cheaply).
    ``validation_envs`` (e.g. ``{"single": "math", "debate": "math_debate"}``) validates the held-out
    items once per named environment instead, each logged under ``val/<name>/``; ``transfer`` (a
    dataset spec, e.g. levels not trained on) is validated in ``transfer_env`` at the start and the
    end of a run, under ``val/transfer/``.
    ``limit`` caps the number of items read from ``train``. Whether the environments named here are
    registered is checked by the root config (:class:`jaxdebate.config.Config`): environments live
    in :mod:`jaxdebate.debate`, a layer above this one."""

    _name: ClassVar[str] = "data"
    train: str = "math500"
    validation: str | None = None
    validation_size: int = 50
    holdout_seed: int = 0
    env_name_remap: Mapping[str, str] = dataclasses.field(default_factory=_default_remap)
    limit: int | None = None
    format: str | None = None
    validation_env: str | None = None
    validation_envs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    transfer: str | None = None
    transfer_env: str = "math"

    def validate(self) -> None:
        self._non_blank("train", "validation", "validation_env", "transfer", "transfer_env")
        if self.validation_envs and self.validation_env is not None:
            self._fail("validation_envs", "set either validation_env or validation_envs, not both")
        if not all(str(k).isidentifier() and v for k, v in self.validation_envs.items()):
            self._fail("validation_envs", "must map names (letters, digits, _) to environment names")
        if "transfer" in self.validation_envs:
            self._fail("validation_envs", "the name 'transfer' is taken by data.transfer's metrics")
        self._at_least(0, "validation_size", "holdout_seed")
        self._at_least(1, "limit")
        if self.format is not None and self.format not in readers.FORMATS:
            self._fail("format", f"must be None or one of {', '.join(readers.FORMATS)}")
        if not all(key and value for key, value in self.env_name_remap.items()):
            self._fail("env_name_remap", "must map non-empty item env names to non-empty environment names")

    def environments(self) -> set[str]:
        """The environment names this section routes items to (for the root config's check)."""
        named = {self.validation_env, *self.validation_envs.values()} - {None}
        return set(self.env_name_remap.values()) | named | ({self.transfer_env} if self.transfer else set())

    def load_transfer(self, train: list[Item]) -> list[Item]:
        """The transfer set's items (empty without ``transfer``); one whose problem is also in
        ``train`` (the training items :meth:`load` returned) is a DataError."""
        items = load_items(self.transfer, format=self.format) if self.transfer else []
        _refuse_shared(train, items, "transfer")
        return items

    def load(self) -> tuple[list[Item], list[Item]]:
        """(train items, validation items) as configured; env names are not remapped here (the
        debate protocol applies ``env_name_remap``)."""
        train = load_items(self.train, limit=self.limit, format=self.format)
        if self.validation is None:
            if self.validation_size >= len(train):
                raise DataError(
                    f"data.validation_size={self.validation_size} leaves no training items: "
                    f"{self.train!r} has {len(train)} items"
                )
            return split_holdout(train, self.validation_size, self.holdout_seed)
        if self.validation_size == 0:
            return train, []
        validation = load_items(self.validation, limit=self.validation_size, format=self.format)
        _refuse_shared(train, validation, "validation")
        return train, validation


def _problem_key(item: Item) -> str:
    return " ".join(item.problem.split())


def _refuse_shared(train: list[Item], held_out: list[Item], field: str) -> None:
    """A held-out set that shares problems (whitespace aside) with the training set would measure
    recall, not learning: a DataError naming the field, the count and the first shared item."""
    seen = {_problem_key(item) for item in train}
    shared = [item for item in held_out if _problem_key(item) in seen]
    if shared:
        raise DataError(
            f"data.{field} shares {len(shared)} of its {len(held_out)} problems with data.train "
            f"(first: item {shared[0].id!r}: {shared[0].problem[:80]!r}); use disjoint sets"
            + (", or data.validation=None to hold items out of data.train" if field == "validation" else ""))
