"""The config's shaping section: strategy name + params and the credit mode, validated when built
(before any compute)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, Mapping

from jaxdebate.configlib import Section
from jaxdebate.errors import ConfigError
from jaxdebate.shaping.registry import get_strategy


@dataclasses.dataclass(frozen=True)
class ShapingConfig(Section):
    """Which reward-shaping strategy to apply, its params, and what each turn is credited with
    (DESIGN §4): `credit="turn"` trains each turn on its own shaped reward; `"return"` on the
    `discount`ed sum of the same agent's shaped rewards from that round on (`credit.py`).

    Raises ConfigError naming `shaping.strategy` / `shaping.params.<key>` / `shaping.credit` /
    `shaping.discount` for an unknown strategy or credit mode, unknown or missing keys, out-of-range
    (discount must be in (0, 1]) or wrongly typed values. Values are normalised to plain
    Python types (an int gamma becomes a float) so `dataclasses.asdict` round-trips.
    """

    _name: ClassVar[str] = "shaping"
    strategy: str = "identity"
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    credit: Literal["turn", "return"] = "turn"
    discount: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()  # field types; then the strategy's own param schema
        object.__setattr__(self, "params", get_strategy(self.strategy).validate(self.params))

    def validate(self) -> None:
        if not 0.0 < self.discount <= 1.0:
            self._fail("discount", "must be in (0, 1]")

    def check_group_size(self, group_size: int) -> None:
        """ConfigError when a strategy's rollout count (coma's n_rollouts_per_prompt) differs from G."""
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group size (generations_per_prompt) must be an int >= 1, got {group_size!r}")
        get_strategy(self.strategy).check_group_size(self.params, group_size)

    def __hash__(self) -> int:
        return hash((self.strategy, tuple(sorted(self.params.items())), self.credit, self.discount))
