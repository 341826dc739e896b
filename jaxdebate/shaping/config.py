"""The config's shaping section: strategy name + params, validated when built (before any compute)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from jaxdebate.configlib import Section
from jaxdebate.errors import ConfigError
from jaxdebate.shaping.registry import get_strategy


@dataclasses.dataclass(frozen=True)
class ShapingConfig(Section):
    """Which reward-shaping strategy to apply and its params (DESIGN §4).

    Raises ConfigError naming `shaping.strategy` / `shaping.params.<key>` for an unknown strategy,
    unknown or missing keys, out-of-range or wrongly typed values. Values are normalised to plain
    Python types (an int gamma becomes a float) so `dataclasses.asdict` round-trips.
    """

    _name: ClassVar[str] = "shaping"
    strategy: str = "identity"
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()  # field types; then the strategy's own param schema
        object.__setattr__(self, "params", get_strategy(self.strategy).validate(self.params))

    def check_group_size(self, group_size: int) -> None:
        """ConfigError when a strategy's rollout count (coma's n_rollouts_per_prompt) differs from G."""
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group size (generations_per_prompt) must be an int >= 1, got {group_size!r}")
        get_strategy(self.strategy).check_group_size(self.params, group_size)

    def __hash__(self) -> int:
        return hash((self.strategy, tuple(sorted(self.params.items()))))
