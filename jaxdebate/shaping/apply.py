"""Batch entry point: validate, then run `jit(vmap(strategy))` over a batch of groups, groups on the lane axis."""

from __future__ import annotations

import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore

from jaxdebate.shaping.config import ShapingConfig
from jaxdebate.shaping.lanes import eval_lanes, mixes_axes, trace_group
from jaxdebate.shaping.registry import STRATEGIES, Group


# Groups per lane block: large enough that each fused loop runs long vectorised stretches, small
# enough that a block's intermediates (~1 KB per group for coma) stay in cache.
BLOCK = 4096
_BARRIER = False


def _map_blocks(block_fn, xs, n_groups: int, block: int):
    """block_fn over consecutive blocks of the leading (group) axis, as one `lax.map` (a loop in
    XLA, not in Python); a ragged batch is padded to whole blocks and the padding dropped."""
    n_blocks = -(-n_groups // block)
    size = -(-n_groups // n_blocks)
    if n_blocks == 1:
        return block_fn(xs)
    pad = n_blocks * size - n_groups
    xs = [jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)) if pad else x for x in xs]
    out = lax.map(block_fn, [x.reshape((n_blocks, size) + x.shape[1:]) for x in xs])
    return out.reshape((n_blocks * size,) + out.shape[2:])[:n_groups]


@functools.partial(jax.jit, static_argnames=("strategy", "static_params", "block"))
def _shape_batch(correct, votes, gold, active, traced_params, *, strategy, static_params, block):
    """jit(vmap(strategy)) over the group axis. The strategy is traced once over one group; when
    it relates elements (reductions, transposes) it is vmapped with the groups as the minor, lane,
    axis in blocks of `block` groups (see `lanes`), otherwise by plain vmap. Compiles once per
    (strategy, static params, shapes); float params are traced, so sweeping gamma/alpha reuses it."""
    fn = STRATEGIES[strategy].fn
    static = dict(static_params)

    def one_group(c, v, g, a, traced):
        shaped = fn(Group(c, v, g, a), {**static, **traced})
        return jnp.where(a, shaped.astype(jnp.float32), 0.0)

    batch = (correct, votes, gold, active)
    one = [jax.ShapeDtypeStruct(x.shape[1:], x.dtype) for x in batch]
    closed, out_tree = trace_group(one_group, *one, traced_params)
    if not mixes_axes(closed.jaxpr):
        as_fun = jcore.jaxpr_as_fun(closed)
        in_axes = (0,) * 4 + (None,) * len(traced_params)
        return jax.vmap(as_fun, in_axes=in_axes)(*batch, *jax.tree_util.tree_leaves(traced_params))[0]

    def block_fn(xs):  # [n, G, A, R] (gold [n]) -> [n, G, A, R]
        c, v, g, a = (jnp.moveaxis(x, 0, -1) for x in xs)
        if _BARRIER:
            c, v, g, a = lax.optimization_barrier((c, v, g, a))
        return jnp.moveaxis(eval_lanes(closed, out_tree, (c, v, g, a, traced_params), (True,) * 4 + (False,)), -1, 0)

    if correct.shape[0] == 0:
        return jnp.zeros(correct.shape, jnp.float32)
    return _map_blocks(block_fn, list(batch), correct.shape[0], block)


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
        dtype = x.dtype if isinstance(x, (jax.Array, np.ndarray)) else jnp.result_type(x)
        if not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(f"shape_rewards: `{name}` must hold integer class ids, got dtype {dtype}")
    return shapes[0]


def _as(x, dtype):
    """x as an array of dtype; arrays that already have it go to the jit untouched (jnp.asarray
    costs ~10 us a call, as much as the whole computation on small batches)."""
    if isinstance(x, (jax.Array, np.ndarray)) and x.dtype == dtype:
        return x
    return jnp.asarray(x, dtype)


def shape_rewards(strategy: str, params: Mapping[str, Any], correct, votes, gold, active) -> jax.Array:
    """Shaped rewards f32 [B, G, A, R] (0 where inactive) for a batch of B groups (DESIGN §4).

    correct f32 [B, G, A, R]; votes i32 [B, G, A, R] (-1 = no answer); gold i32 [B] (-1 = none
    correct); active bool [B, G, A, R]. Params are validated (ConfigError) before any compute,
    including coma's n_rollouts_per_prompt == G.
    """
    cfg = ShapingConfig(strategy, params)
    shape = _check_inputs(correct, votes, gold, active)
    cfg.check_group_size(shape[1])
    spec = STRATEGIES[cfg.strategy]
    static, traced = spec.split(cfg.params)
    traced = {k: np.float32(v) for k, v in traced.items()}
    return _shape_batch(
        _as(correct, np.float32),
        _as(votes, np.int32),
        _as(gold, np.int32),
        _as(active, np.bool_),
        traced,
        strategy=cfg.strategy,
        static_params=static,
        block=BLOCK,
    )
