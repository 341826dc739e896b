"""Sample filters (the seeds' FilteringStreamer): zero-signal groups and truncated completions."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdebate.shaping.advantages import group_axes, zero_signal_groups


def _safe_ratio(num, den):
    return jnp.where(den > 0, num / jnp.maximum(den, 1), 0.0)


@functools.partial(jax.jit, static_argnames=("grouping", "drop_zero_signal", "drop_truncated", "per_agent"))
def sample_filter(shaped, active, truncated, *, grouping: str, drop_zero_signal: bool = True,
                  drop_truncated: bool = True, per_agent: bool = False):
    """(keep bool [B, G, A, R], stats) for the training samples.

    A group (see `advantages.GROUPINGS`) has zero signal when all its active members share one
    credit up to float32 rounding, hi - lo <= ZERO_SIGNAL_TOL * max(1, |hi|, |lo|) (a singleton
    included; `advantages.zero_signal_groups`, the same test `compute_advantages` zeroes such a
    group's advantages with): its group-baseline advantages are all exactly 0. Stats (f32):
    `zero_advantage_fraction` (zero-signal groups / groups with an active member),
    `truncated_fraction` (truncated / active turns), `kept_fraction` (kept / active turns),
    `n_groups`, `n_active`, `n_kept`. Stats are computed whether or not the filters drop anything.
    ``per_agent``: the groups are split by agent as in `compute_advantages` (the groups counted are
    then the per-agent ones), so the turns dropped are exactly those it gives a zero-signal 0.
    """
    shaped = jnp.asarray(shaped, jnp.float32)
    active = jnp.asarray(active, bool)
    truncated = jnp.asarray(truncated, bool) & active
    axes = group_axes(grouping, per_agent)
    has_member = jnp.any(active, axis=axes, keepdims=True)
    zero_signal = has_member & zero_signal_groups(shaped, active, grouping, per_agent)
    keep = active
    if drop_zero_signal:
        keep = keep & ~zero_signal
    if drop_truncated:
        keep = keep & ~truncated
    n_groups = jnp.sum(has_member).astype(jnp.float32)
    n_active = jnp.sum(active).astype(jnp.float32)
    n_kept = jnp.sum(keep).astype(jnp.float32)
    stats = {
        "zero_advantage_fraction": _safe_ratio(jnp.sum(zero_signal).astype(jnp.float32), n_groups),
        "truncated_fraction": _safe_ratio(jnp.sum(truncated).astype(jnp.float32), n_active),
        "kept_fraction": _safe_ratio(n_kept, n_active),
        "n_groups": n_groups,
        "n_active": n_active,
        "n_kept": n_kept,
    }
    return keep, stats
