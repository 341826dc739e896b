"""`eval_lanes`: vmap with the mapped (group) axis kept LAST, the lane axis, in every intermediate.

Why: `jax.vmap` moves the mapped axis to the front of most intermediates, so XLA:CPU's fused loops
run over tiny minor dimensions (A = 3, R = 2) one scalar at a time. With the groups as the minor
axis every fused loop is a long contiguous one that the compiler vectorises.

How: the per-group function is traced once to a jaxpr over one group's shapes; each equation is
then re-emitted with a trailing lane axis appended to its batched operands (shape-preserving rules
for elementwise ops, broadcasts, reshapes, transposes, reductions, slices, nested jits). Any other
primitive falls back to `jax.vmap` of that one primitive, so the result is always that of vmap:
the same primitives, in the same order, on the same values.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore

# Primitives applied element by element: operands are broadcast to the output shape + lanes.
_ELEMENTWISE = frozenset("""
    abs add and atan2 cbrt ceil clamp convert_element_type copy cos div eq exp exp2 expm1 floor ge gt
    integer_pow is_finite le log log1p logistic lt max min mul ne neg nextafter not or pow rem round
    rsqrt select_n sign sin sqrt square sub tan tanh xor
""".split())
# Primitives whose params name operand axes that stay valid when a trailing axis is appended.
_AXES_UNCHANGED = frozenset("""
    argmax argmin cumlogsumexp cummax cummin cumprod cumsum reduce_and reduce_max reduce_min
    reduce_or reduce_prod reduce_sum reduce_xor rev squeeze optimization_barrier
""".split())
# Call-like primitives: their body is re-emitted inline with lanes (param holding the body).
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}


def _with_lanes(x, batched: bool, shape: tuple[int, ...], n_lanes: int):
    """x (one group's shape, plus lanes when batched) broadcast to shape + (n_lanes,)."""
    rank = np.ndim(x) - batched
    dims = tuple(range(rank)) if rank == len(shape) else ()  # same rank (size-1 dims broadcast) or scalar
    dims += (len(shape),) if batched else ()
    target = tuple(shape) + (n_lanes,)
    return x if np.shape(x) == target else lax.broadcast_in_dim(x, target, dims)


def _lane_params(name: str, params: dict, ndim: int, n_lanes: int) -> dict | None:
    """The params of a shape-changing primitive for operands with a trailing lane axis (None: no rule)."""
    p = dict(params)
    if name == "broadcast_in_dim":
        p["shape"] = tuple(p["shape"]) + (n_lanes,)
        p["broadcast_dimensions"] = tuple(p["broadcast_dimensions"]) + (len(params["shape"]),)
    elif name == "reshape" and p.get("dimensions") is None:
        p["new_sizes"] = tuple(p["new_sizes"]) + (n_lanes,)
    elif name == "transpose":
        p["permutation"] = tuple(p["permutation"]) + (ndim,)
    elif name == "slice":
        p["start_indices"] = tuple(p["start_indices"]) + (0,)
        p["limit_indices"] = tuple(p["limit_indices"]) + (n_lanes,)
        if p.get("strides") is not None:
            p["strides"] = tuple(p["strides"]) + (1,)
    elif name == "pad":
        p["padding_config"] = tuple(p["padding_config"]) + ((0, 0, 0),)
    elif name not in _AXES_UNCHANGED and name != "concatenate":
        return None
    return p


def _vmap_one(eqn, vals, batched, n_lanes):
    """Fallback: the primitive under jax.vmap (mapped axis moved to the front and back again)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    front = [jnp.moveaxis(x, -1, 0) if b else x for x, b in zip(vals, batched)]
    out = jax.vmap(lambda *xs: eqn.primitive.bind(*xs, **params),
                   in_axes=[0 if b else None for b in batched], axis_size=n_lanes)(*front)
    outs = out if eqn.primitive.multiple_results else [out]
    return [jnp.moveaxis(o, 0, -1) for o in outs], [True] * len(outs)


def _emit(eqn, vals, batched, n_lanes):
    """(outputs, batched flags) of one equation."""
    name = eqn.primitive.name
    if not any(batched):
        out = eqn.primitive.bind(*vals, **eqn.primitive.get_bind_params(eqn.params))
        outs = out if eqn.primitive.multiple_results else [out]
        return list(outs), [False] * len(outs)
    if name in _CALLS:
        body = eqn.params[_CALLS[name]]
        consts = body.consts if hasattr(body, "consts") else ()
        jaxpr = body.jaxpr if hasattr(body, "jaxpr") else body
        return _eval(jaxpr, consts, vals, batched, n_lanes)
    if name in _ELEMENTWISE:
        shape = eqn.outvars[0].aval.shape
        vals = [_with_lanes(x, b, shape, n_lanes) for x, b in zip(vals, batched)]
        return [eqn.primitive.bind(*vals, **eqn.params)], [True]
    ndim = max(np.ndim(x) - b for x, b in zip(vals, batched))
    params = _lane_params(name, eqn.params, ndim, n_lanes)
    if params is None or (name == "pad" and batched[1]) or (name != "concatenate" and not batched[0]
                                                          and name != "optimization_barrier"):
        return _vmap_one(eqn, vals, batched, n_lanes)
    if name == "concatenate":
        vals = [_with_lanes(x, b, np.shape(x)[: np.ndim(x) - b], n_lanes) for x, b in zip(vals, batched)]
        batched = [True] * len(vals)
    out = eqn.primitive.bind(*vals, **params)
    outs = out if eqn.primitive.multiple_results else [out]
    flags = list(batched) if name == "optimization_barrier" else [True]
    return list(outs), flags


def _eval(jaxpr, consts, args, batched, n_lanes):
    """Evaluate a jaxpr whose batched inputs carry a trailing lane axis; returns (outs, batched)."""
    env: dict[Any, tuple[Any, bool]] = {}

    def read(v):
        if isinstance(v, jcore.Literal):
            return np.asarray(v.val, dtype=v.aval.dtype), False
        return env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = (x, False)
    for v, x, b in zip(jaxpr.invars, args, batched):
        env[v] = (x, b)
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs, flags = _emit(eqn, [x for x, _ in ins], [b for _, b in ins], n_lanes)
        for v, x, b in zip(eqn.outvars, outs, flags):
            if not isinstance(v, jcore.DropVar):
                env[v] = (x, b)
    results = [read(v) for v in jaxpr.outvars]
    return [x for x, _ in results], [b for _, b in results]


def trace_group(fn: Callable, *args):
    """fn's closed jaxpr and output tree, traced once over arguments' shapes and dtypes (any leaves
    with .shape and .dtype, e.g. jax.ShapeDtypeStruct)."""
    leaves, treedef = jax.tree_util.tree_flatten(args)
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
    closed, out_shape = jax.make_jaxpr(
        lambda *xs: fn(*jax.tree_util.tree_unflatten(treedef, xs)), return_shape=True)(*avals)
    return closed, jax.tree_util.tree_structure(out_shape)


def mixes_axes(jaxpr) -> bool:
    """Whether any equation relates different elements (a reduction, transpose, reshape, ...): if
    none does, the layout of the groups does not matter and plain vmap needs no transposes."""
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _CALLS:
            body = eqn.params[_CALLS[name]]
            if mixes_axes(body.jaxpr if hasattr(body, "jaxpr") else body):
                return True
        elif not (name in _ELEMENTWISE or name == "broadcast_in_dim" and eqn.invars[0].aval.ndim == 0):
            return True
    return False


def eval_lanes(closed, out_tree, args, in_lanes):
    """Evaluate a `trace_group` jaxpr on arguments whose mapped leaves carry a trailing lane axis.

    in_lanes: one bool per positional argument (True: all its leaves are mapped over their last
    axis). Every output leaf comes back with the lane axis last.
    """
    leaves = jax.tree_util.tree_leaves(args)
    flags = jax.tree_util.tree_leaves([jax.tree_util.tree_map(lambda _: b, a) for a, b in zip(args, in_lanes)])
    n_lanes = next(np.shape(x)[-1] for x, b in zip(leaves, flags) if b)
    outs, out_flags = _eval(closed.jaxpr, closed.consts, leaves, flags, n_lanes)
    outs = [_with_lanes(x, b, np.shape(x)[: np.ndim(x) - b], n_lanes) for x, b in zip(outs, out_flags)]
    return jax.tree_util.tree_unflatten(out_tree, outs)
