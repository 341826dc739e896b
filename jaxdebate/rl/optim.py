"""The optimiser side of an update, shared by the GRPO learner and DPO: the learning-rate schedule,
AdamW, and ``guarded_apply`` (global-norm clip, optax update, and the non-finite guard that keeps
the previous weights when a loss, gradient or result is not finite)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxdebate.rl.config import OptimizerConfig
from jaxdebate.schedules import warmup_then_decay


def lr_schedule(cfg: OptimizerConfig, total_steps: int) -> optax.Schedule:
    """Linear warm-up from 0 to ``peak_lr``, then ``cfg.schedule`` from ``peak_lr`` to ``end_lr``."""
    return warmup_then_decay(cfg.peak_lr, cfg.end_lr, cfg.warmup_steps, total_steps, cfg.schedule)


def make_optimizer(cfg: OptimizerConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW on the schedule; clipping happens in :func:`guarded_apply` (so the pre-clip norm is logged)."""
    return optax.adamw(
        lr_schedule(cfg, total_steps), b1=cfg.b1, b2=cfg.b2, eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )


def all_finite(tree) -> jax.Array:
    """bool []: every floating-point leaf of ``tree`` is finite (integer leaves always are)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def guarded_apply(tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any, loss,
                  *, grad_clip: float, scale=None) -> tuple[Any, Any, dict[str, jax.Array]]:
    """``(params, opt_state, metrics)`` after one optimiser update (pure; jit it with the caller).

    The gradient is clipped to global norm ``grad_clip`` (0: no clip) and ``tx``'s update is
    multiplied by ``scale`` when given (a learning rate passed per call). A non-finite loss, gradient
    or result is never applied: params and optimiser state stay as they were, and
    ``metrics["nonfinite/<what>"]`` is 1 for what was not finite.
    """
    grad_norm = optax.global_norm(grads)
    if grad_clip > 0:
        factor = jnp.minimum(1.0, grad_clip / (grad_norm + 1e-6))
        grads = jax.tree.map(lambda g: g * factor, grads)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    if scale is not None:
        updates = jax.tree.map(lambda u: scale * u, updates)
    new_params = optax.apply_updates(params, updates)
    finite = {"loss": jnp.isfinite(loss), "grad_norm": jnp.isfinite(grad_norm),
              "params": all_finite(new_params) & all_finite(new_opt_state)}
    ok = finite["loss"] & finite["grad_norm"] & finite["params"]
    params, opt_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), (new_params, new_opt_state),
                                     (params, opt_state))
    metrics = {"grad_norm": grad_norm, **{f"nonfinite/{k}": 1.0 - v.astype(jnp.float32) for k, v in finite.items()}}
    return params, opt_state, metrics


def nonfinite_update(metrics: Mapping[str, Any], prefix: str = "") -> str | None:
    """The names of what was non-finite in an update's ``metrics`` (``None``: the update applied);
    ``prefix`` reads them from a logged record (``learner/``: the loop's metrics.jsonl)."""
    head = f"{prefix}nonfinite/"
    bad = [k[len(head):] for k, v in metrics.items() if k.startswith(head) and v]
    return ", ".join(bad) if bad else None
