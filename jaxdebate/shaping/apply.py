"""Batch entry point: validate, then run `jit(vmap(strategy))` and the credit mode over a batch of groups."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.shaping.config import ShapingConfig
from jaxdebate.shaping.credit import apply_credit
from jaxdebate.shaping.registry import STRATEGIES, Group


@functools.partial(jax.jit, static_argnames=("strategy", "static_params", "credit"))
def _shape_batch(correct, votes, gold, active, traced_params, discount, *, strategy, static_params, credit):
    """jit(vmap(strategy)), then the credit mode, over the leading group axis. Compiles once per
    (strategy, static params, credit mode, shapes); float params and the discount are traced, so
    sweeping gamma/alpha/discount reuses the executable."""
    fn = STRATEGIES[strategy].fn
    params = {**dict(static_params), **traced_params}

    def one_group(c, v, g, a):
        shaped = fn(Group(c, v, g, a), params)
        return apply_credit(jnp.where(a, shaped.astype(jnp.float32), 0.0), a, credit, discount)

    return jax.vmap(one_group)(correct, votes, gold, active)


def _check_inputs(correct, votes, gold, active):
    names = ("correct", "votes", "active")
    shapes = [tuple(np.shape(x)) for x in (correct, votes, active)]
    for name, shape in zip(names, shapes):
        if len(shape) != 4:
            raise ValueError(f"shape_rewards: `{name}` must be [B, G, A, R], got shape {shape}")
    if len(set(shapes)) != 1:
        detail = ", ".join(f"{n} {s}" for n, s in zip(names, shapes))
        raise ValueError(f"shape_rewards: correct, votes and active must share one shape; got {detail}")
    if tuple(np.shape(gold)) != shapes[0][:1]:
        raise ValueError(f"shape_rewards: `gold` must be [B]={shapes[0][:1]}, got shape {tuple(np.shape(gold))}")
    for name, x in (("votes", votes), ("gold", gold)):
        if not jnp.issubdtype(jnp.result_type(x), jnp.integer):
            raise ValueError(f"shape_rewards: `{name}` must hold integer class ids, got dtype {jnp.result_type(x)}")
    return shapes[0]


def shape_rewards(config: ShapingConfig, correct, votes, gold, active) -> jax.Array:
    """Per-turn credit f32 [B, G, A, R] (0 where inactive) for a batch of B groups (DESIGN §4): each
    turn's shaped reward under ``config.credit == "turn"``, the discounted return of the agent's
    shaped rewards under ``"return"``. Advantages are computed from this.

    config: a validated ``ShapingConfig``. correct f32 [B, G, A, R]; votes i32 [B, G, A, R] (-1 = no
    answer); gold i32 [B] (-1 = none correct); active bool [B, G, A, R]. Shapes, dtypes and coma's
    n_rollouts_per_prompt == G are checked (ValueError / ConfigError) before any compute.
    """
    if not isinstance(config, ShapingConfig):
        raise TypeError("shape_rewards(config, correct, votes, gold, active): config must be a "
                        f"ShapingConfig, got {type(config).__name__}")
    shape = _check_inputs(correct, votes, gold, active)
    config.check_group_size(shape[1])
    spec = STRATEGIES[config.strategy]
    static, traced = spec.split(config.params)
    traced = {k: jnp.float32(v) for k, v in traced.items()}
    return _shape_batch(
        jnp.asarray(correct, jnp.float32),
        jnp.asarray(votes, jnp.int32),
        jnp.asarray(gold, jnp.int32),
        jnp.asarray(active, bool),
        traced,
        jnp.float32(config.discount),
        strategy=config.strategy,
        static_params=static,
        credit=config.credit,
    )
