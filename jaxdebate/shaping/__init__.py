"""Reward shaping for multi-agent debate (DESIGN §4): five credit-assignment strategies as
jit(vmap) array programs, the credit mode (turn or discounted return), group-baseline advantages,
sample filters and reward metrics. REDUCTIONS.md says what each strategy reduces to.

Pure JAX: no dependency on the model or the sampler.
"""

from jaxdebate.shaping import strategies as _strategies  # noqa: F401  (registers the built-ins)
from jaxdebate.shaping.advantages import ESTIMATORS, GROUPINGS, ZERO_SIGNAL_TOL, compute_advantages
from jaxdebate.shaping.apply import shape_rewards
from jaxdebate.shaping.config import ShapingConfig
from jaxdebate.shaping.credit import CREDIT_MODES, apply_credit
from jaxdebate.shaping.filters import sample_filter
from jaxdebate.shaping.metrics import advantage_metrics, reward_metrics
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
    "CREDIT_MODES",
    "ESTIMATORS",
    "GROUPINGS",
    "POTENTIAL_TYPES",
    "STRATEGIES",
    "ZERO_SIGNAL_TOL",
    "Group",
    "Param",
    "ShapingConfig",
    "advantage_metrics",
    "apply_credit",
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
