"""Batch entry point: validate, then run `jit(vmap(strategy))` over a batch of groups."""

from __future__ import annotations

import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.shaping.config import ShapingConfig
from jaxdebate.shaping.registry import STRATEGIES, Group


@functools.partial(jax.jit, static_argnames=("strategy", "static_params"))
def _shape_batch(correct, votes, gold, active, traced_params, *, strategy, static_params):
    """jit(vmap(strategy)) over the leading group axis. Compiles once per (strategy, static params,
    shapes); float params are traced, so sweeping gamma/alpha reuses the executable."""
    fn = STRATEGIES[strategy].fn
    params = {**dict(static_params), **traced_params}

    def one_group(c, v, g, a):
        shaped = fn(Group(c, v, g, a), params)
        return jnp.where(a, shaped.astype(jnp.float32), 0.0)

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


def shape_rewards(strategy: str | ShapingConfig, *args) -> jax.Array:
    """Shaped rewards f32 [B, G, A, R] (0 where inactive) for a batch of B groups (DESIGN §4).

    Two forms: ``shape_rewards(config, correct, votes, gold, active)`` with a ``ShapingConfig`` (already
    validated; what the trainer passes), or ``shape_rewards(strategy, params, correct, votes, gold,
    active)``, whose params are validated here. correct f32 [B, G, A, R]; votes i32 [B, G, A, R] (-1 =
    no answer); gold i32 [B] (-1 = none correct); active bool [B, G, A, R]. Everything, including
    coma's n_rollouts_per_prompt == G, is checked (ConfigError / ValueError) before any compute.
    """
    if isinstance(strategy, ShapingConfig):
        cfg, arrays = strategy, args
    elif args:
        cfg, arrays = ShapingConfig(strategy, args[0]), args[1:]
    else:
        raise TypeError("shape_rewards(strategy, params, correct, votes, gold, active): params missing")
    if len(arrays) != 4:
        raise TypeError("shape_rewards takes (config, correct, votes, gold, active) or (strategy, params, "
                        f"correct, votes, gold, active); got {len(arrays)} arrays after the strategy")
    correct, votes, gold, active = arrays
    shape = _check_inputs(correct, votes, gold, active)
    cfg.check_group_size(shape[1])
    spec = STRATEGIES[cfg.strategy]
    static, traced = spec.split(cfg.params)
    traced = {k: jnp.float32(v) for k, v in traced.items()}
    return _shape_batch(
        jnp.asarray(correct, jnp.float32),
        jnp.asarray(votes, jnp.int32),
        jnp.asarray(gold, jnp.int32),
        jnp.asarray(active, bool),
        traced,
        strategy=cfg.strategy,
        static_params=static,
    )
