"""Group-baseline advantage estimators over shaped rewards (the same for every strategy, DESIGN §4).

Groupings over [B, G, A, R]:
  `prompt`      — all active turns of one prompt's G debates form one group (reduce over G, A, R);
  `agent_round` — each (b, agent, round) slot across the G rollouts (reduce over G).

`per_agent=True` (``loss.per_agent_norm``; Dr. MAS, per-agent normalisation for multi-agent GRPO)
splits each group by agent: under `prompt` a group is one agent's active turns of the prompt's G
debates (reduce over G, R), so an agent whose credits are larger or more spread than the others'
does not set the others' scale; `agent_round` groups already hold one agent, so it changes nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdebate.errors import ConfigError

ESTIMATORS = ("grpo", "rloo", "dr_grpo")
GROUPINGS = ("prompt", "agent_round")

# A group whose active members' credits spread by at most ZERO_SIGNAL_TOL * max(1, |hi|, |lo|) is
# zero-signal: its advantages are exactly 0 and the sample filter drops it. Credit that is constant
# in exact arithmetic can differ by a few float32 roundings (1e-8..1e-7, e.g. agreement PBRS under
# return credit), which grpo would otherwise divide by (std + eps) into advantages of ~+-0.03. The
# one tolerance shared by `compute_advantages` and `filters.sample_filter` (via `zero_signal_groups`).
ZERO_SIGNAL_TOL = 1e-6


def group_axes(grouping: str, per_agent: bool = False) -> tuple[int, ...]:
    """The axes of [B, G, A, R] that one advantage group reduces over (``per_agent``: never A)."""
    if grouping == "prompt":
        return (1, 3) if per_agent else (1, 2, 3)
    if grouping == "agent_round":
        return (1,)
    raise ConfigError(f"advantage grouping must be one of {', '.join(GROUPINGS)}, got {grouping!r}")


def masked_group_stats(x, active, grouping: str, per_agent: bool = False):
    """(sum, count, mean) of the active members of each group, broadcastable to [B, G, A, R]."""
    axes = group_axes(grouping, per_agent)
    x = jnp.where(active, x, 0.0)
    total = jnp.sum(x, axis=axes, keepdims=True)
    count = jnp.sum(active, axis=axes, keepdims=True, dtype=jnp.int32).astype(jnp.float32)
    return total, count, total / jnp.maximum(count, 1.0)


def zero_signal_groups(shaped, active, grouping: str, per_agent: bool = False):
    """bool, broadcastable to [B, G, A, R]: the group's active members share one credit up to
    float32 rounding, hi - lo <= ZERO_SIGNAL_TOL * max(1, |hi|, |lo|) (a singleton included).
    A group without an active member is reported too (hi = -inf, lo = inf); callers mask it."""
    axes = group_axes(grouping, per_agent)
    hi = jnp.max(jnp.where(active, shaped, -jnp.inf), axis=axes, keepdims=True)
    lo = jnp.min(jnp.where(active, shaped, jnp.inf), axis=axes, keepdims=True)
    scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(hi), jnp.abs(lo)))
    return hi - lo <= ZERO_SIGNAL_TOL * scale


@functools.partial(jax.jit, static_argnames=("estimator", "grouping", "per_agent"))
def compute_advantages(shaped, active, *, estimator: str, grouping: str, eps=1e-6, per_agent: bool = False):
    """Advantages f32 [B, G, A, R] (0 where inactive).

    grpo: (x - mean) / (std + eps) over the group's active members (population std);
    rloo: x - mean of the group's OTHER active members (0 for a singleton group);
    dr_grpo: x - mean (Dr. GRPO, Liu et al. 2025: no std division, so a group with little spread is
    not scaled up and the advantage keeps the credit's units).
    A zero-signal group (`zero_signal_groups`: credits equal up to ZERO_SIGNAL_TOL) gets exactly 0.
    ``per_agent``: the groups are split by agent (module docstring) for every estimator.
    """
    if estimator not in ESTIMATORS:
        raise ConfigError(f"advantage estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    shaped = jnp.asarray(shaped, jnp.float32)
    active = jnp.asarray(active, bool)
    total, count, mean = masked_group_stats(shaped, active, grouping, per_agent)
    dev = jnp.where(active, shaped - mean, 0.0)
    if estimator == "grpo":
        var = jnp.sum(dev * dev, axis=group_axes(grouping, per_agent), keepdims=True) / jnp.maximum(count, 1.0)
        adv = dev / (jnp.sqrt(var) + eps)
    elif estimator == "dr_grpo":
        adv = dev
    else:
        others = jnp.maximum(count - 1.0, 1.0)
        adv = jnp.where(count > 1.0, shaped - (total - shaped) / others, 0.0)
    flat = zero_signal_groups(shaped, active, grouping, per_agent)
    return jnp.where(active & ~flat, adv, 0.0)
