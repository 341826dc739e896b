"""Reward shaping for multi-agent debate (DESIGN §4): five credit-assignment strategies as
jit(vmap) array programs, group-baseline advantages, sample filters and reward metrics.

Pure JAX: no dependency on the model or the sampler.
"""

from jaxdebate.shaping import strategies as _strategies  # noqa: F401  (registers the built-ins)
from jaxdebate.shaping.advantages import ESTIMATORS, GROUPINGS, compute_advantages
from jaxdebate.shaping.apply import shape_rewards
from jaxdebate.shaping.config import ShapingConfig
from jaxdebate.shaping.filters import sample_filter
from jaxdebate.shaping.metrics import reward_metrics
from jaxdebate.shaping.registry import (
    STRATEGIES,
    Group,
    Param,
    config_names,
    get_strategy,
    list_strategies,
    register_strategy,
)
from jaxdebate.shaping.strategies import POTENTIAL_TYPES
from jaxdebate.shaping.team import team_reward

__all__ = [
    "ESTIMATORS",
    "GROUPINGS",
    "POTENTIAL_TYPES",
    "STRATEGIES",
    "Group",
    "Param",
    "ShapingConfig",
    "compute_advantages",
    "config_names",
    "get_strategy",
    "list_strategies",
    "register_strategy",
    "reward_metrics",
    "sample_filter",
    "shape_rewards",
    "team_reward",
]
