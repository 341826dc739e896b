"""The ``data`` section of an experiment config: which items to train and validate on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from jaxdebate.data import readers
from jaxdebate.data.items import Item
from jaxdebate.data.sources import load_items
from jaxdebate.data.stream import split_holdout
from jaxdebate.errors import ConfigError, DataError


def _default_remap() -> dict[str, str]:
    return {"math": "math_debate"}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``train``/``validation``: dataset names or JSONL paths (see :func:`load_items`). With
    ``validation=None``, ``validation_size`` items are held out of ``train`` (chosen by
    ``holdout_seed``); otherwise at most ``validation_size`` items are read from ``validation``.
    ``env_name_remap`` routes items to environments (``{"math": "math_debate"}`` turns single-agent
    items into debates). ``validation_env`` plays every validation item in that environment instead
    (``"math"``: one agent, one round, e.g. to measure the policy's own held-out accuracy cheaply).
    ``limit`` caps the number of items read from ``train``."""

    train: str = "math500"
    validation: str | None = None
    validation_size: int = 50
    holdout_seed: int = 0
    env_name_remap: Mapping[str, str] = dataclasses.field(default_factory=_default_remap)
    limit: int | None = None
    format: str | None = None
    validation_env: str | None = None

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ConfigError:
            return ConfigError(f"data.{field}: {why} (got {getattr(self, field)!r})")

        if not isinstance(self.train, str) or not self.train.strip():
            raise bad("train", "must be a dataset name or a .jsonl path")
        if self.validation is not None and (not isinstance(self.validation, str) or not self.validation.strip()):
            raise bad("validation", "must be a dataset name, a .jsonl path or None")
        for field in ("validation_size", "holdout_seed"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise bad(field, "must be a non-negative integer")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise bad("limit", "must be a positive integer or None")
        if self.format is not None and self.format not in readers.FORMATS:
            raise bad("format", f"must be None or one of {', '.join(readers.FORMATS)}")
        if not isinstance(self.env_name_remap, Mapping):
            raise bad("env_name_remap", "must be a mapping from item env names to environment names")
        remap = dict(self.env_name_remap)
        for key, value in remap.items():
            if not isinstance(key, str) or not key or not isinstance(value, str) or not value:
                raise ConfigError(f"data.env_name_remap: entry {key!r}: {value!r} must map a non-empty string to one")
        from jaxdebate.debate.envs import env_names  # lazy: the environments import this package

        if self.validation_env is not None and self.validation_env not in env_names():
            raise bad("validation_env", f"must be None or a registered environment ({', '.join(env_names())})")
        unknown = sorted(set(remap.values()) - set(env_names()))
        if unknown:
            raise ConfigError(
                f"data.env_name_remap: target environment(s) {unknown} are not registered; "
                f"registered: {', '.join(env_names())}"
            )
        object.__setattr__(self, "env_name_remap", remap)

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
        return train, load_items(self.validation, limit=self.validation_size, format=self.format)
