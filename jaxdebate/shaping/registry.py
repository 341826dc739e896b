"""Registry of reward-shaping strategies: a strategy is one decorated pure function plus its param schema.

Adding a strategy::

    @register_strategy("my_strategy", params=(Param("beta", float, in_unit_interval),))
    def my_strategy(group: Group, params) -> jnp.ndarray:   # shaped f32 [G, A, R]
        ...

Float params are passed to the function as traced f32 scalars (sweeping them does not recompile);
all other params are static Python values.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Mapping, NamedTuple

from jaxdebate.configlib import check_value
from jaxdebate.errors import ConfigError


class Group(NamedTuple):
    """One prompt's G debates as dense arrays (DESIGN §4)."""

    correct: Any  # f32 [G, A, R]
    votes: Any  # i32 [G, A, R]; -1 = no answer
    gold: Any  # i32 []; -1 = no correct answer sampled
    active: Any  # bool [G, A, R]


Validator = Callable[[Any], "str | None"]  # returns a reason when the value is invalid


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter of a strategy: name, Python type, optional validator returning an error reason."""

    name: str
    type: type
    validator: Validator | None = None

    @property
    def traced(self) -> bool:
        return self.type is float

    def check(self, value: Any, strategy: str) -> Any:
        """Return the value normalised to a plain Python type, or raise ConfigError naming it: the
        type check is the config sections' own (:func:`jaxdebate.configlib.check_value`)."""
        where = f"shaping.params.{self.name}"
        try:
            value = check_value(where, value, self.type)
        except ConfigError as e:
            raise ConfigError(f"{e} (strategy {strategy})") from None
        if self.validator is not None:
            reason = self.validator(value)
            if reason:
                raise ConfigError(f"{where} {reason}, got {value!r} (strategy {strategy})")
        return value


@dataclasses.dataclass(frozen=True)
class StrategySpec:
    """A registered strategy: its per-group function and param schema.

    `group_size_param` names an int param that must equal the group size G (coma's
    n_rollouts_per_prompt, the seeds' Pitfall 4).
    """

    name: str
    fn: Callable[[Group, Mapping[str, Any]], Any]
    params: tuple[Param, ...]
    group_size_param: str | None = None
    config_name: str = ""  # the stem of its config files and runs (``coma`` for coma_advantage)

    def validate(self, params: Any) -> dict[str, Any]:
        """Check keys and values; return a plain dict of normalised values."""
        if not isinstance(params, Mapping):
            raise ConfigError(f"shaping.params must be a mapping, got {type(params).__name__}")
        expected = {p.name: p for p in self.params}
        listing = ", ".join(expected) or "no params"
        for key in params:
            if key not in expected:
                raise ConfigError(
                    f"shaping.params.{key}: unknown key for strategy {self.name} (expected {listing})"
                )
        out = {}
        for name, p in expected.items():
            if name not in params:
                raise ConfigError(
                    f"shaping.params.{name}: missing, strategy {self.name} needs {listing}"
                )
            out[name] = p.check(params[name], self.name)
        return out

    def check_group_size(self, params: Mapping[str, Any], group_size: int) -> None:
        if self.group_size_param is None:
            return
        n = params[self.group_size_param]
        if n != group_size:
            raise ConfigError(
                f"shaping.params.{self.group_size_param}={n} must equal the number of rollouts per "
                f"prompt G={group_size} (strategy {self.name})"
            )

    def split(self, params: Mapping[str, Any]) -> tuple[tuple[tuple[str, Any], ...], dict[str, float]]:
        """(static params as a hashable sorted tuple, traced float params as a dict)."""
        static = tuple(sorted((p.name, params[p.name]) for p in self.params if not p.traced))
        traced = {p.name: params[p.name] for p in self.params if p.traced}
        return static, traced


_REGISTRY: dict[str, StrategySpec] = {}
STRATEGIES: Mapping[str, StrategySpec] = types.MappingProxyType(_REGISTRY)


def register_strategy(
    name: str, params: tuple[Param, ...] = (), *, group_size_param: str | None = None,
    config_name: str | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator registering `fn(group: Group, params) -> shaped f32 [G, A, R]` under `name`.

    `config_name` (default `name`) is the stem of the strategy's config file in an experiment family
    (``configs/coma.py``) and so of its sweep runs; sweeps and analysis list strategies from here.
    """

    def deco(fn: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"shaping strategy {name!r} is already registered")
        if group_size_param is not None and group_size_param not in {p.name for p in params}:
            raise ValueError(f"group_size_param {group_size_param!r} is not a param of {name}")
        stem = config_name or name
        if stem in config_names():
            raise ValueError(f"config name {stem!r} of strategy {name!r} is already taken")
        _REGISTRY[name] = StrategySpec(name, fn, tuple(params), group_size_param, stem)
        return fn

    return deco


def list_strategies() -> list[str]:
    return sorted(_REGISTRY)


def config_names() -> tuple[str, ...]:
    """Every strategy's config-file stem, in registration order (the built-ins in DESIGN §4 order)."""
    return tuple(spec.config_name for spec in _REGISTRY.values())


def get_strategy(name: Any) -> StrategySpec:
    """The registered strategy `name`, or ConfigError naming shaping.strategy and listing the known ones."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ConfigError(
            f"shaping.strategy: unknown strategy {name!r}; known: {', '.join(list_strategies())}"
        )
    return _REGISTRY[name]


# Validators shared by the built-in strategies.
def in_half_open_unit(x: float) -> str | None:
    return None if 0.0 < x <= 1.0 else "must be in (0, 1]"


def in_unit_interval(x: float) -> str | None:
    return None if 0.0 <= x <= 1.0 else "must be in [0, 1]"


def positive(x: int) -> str | None:
    return None if x >= 1 else "must be >= 1"


def one_of(*choices: str) -> Validator:
    def check(x: str) -> str | None:
        return None if x in choices else f"must be one of {', '.join(choices)}"

    return check
