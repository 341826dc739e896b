"""The optimiser side of an update, shared by the GRPO learner and DPO: the learning-rate schedule,
AdamW, and ``guarded_apply`` (global-norm clip, optax update, and the non-finite guard that keeps
the previous weights when a loss, gradient or result is not finite)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
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


@dataclasses.dataclass(frozen=True)
class AdamWBound:
    """The constants of an AdamW update ``p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)``
    from which :func:`guarded_apply` knows, before making it, that its result is finite.

    ``max_lr`` bounds the learning rate ``tx`` applies (its schedule's peak; times ``scale`` when
    the caller passes one)."""

    b1: float
    b2: float
    weight_decay: float
    max_lr: float = 1.0

    @classmethod
    def of(cls, cfg: OptimizerConfig) -> AdamWBound:
        """The bound of :func:`make_optimizer`'s AdamW (no schedule rises above ``peak_lr``)."""
        return cls(b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, max_lr=cfg.peak_lr)

    @functools.cached_property
    def max_direction(self) -> float | None:
        """A bound on ``|m_hat / (sqrt(v_hat) + eps)|`` over every step and gradient sequence, or
        ``None`` when there is none (``b1 ** 2 >= b2``).

        Cauchy-Schwarz on the moments' sums gives ``|m_t| / sqrt(v_t) <= (1 - b1) / sqrt(1 - b2) *
        sqrt(sum_{k<t} (b1^2 / b2)^k)``; the bias corrections multiply it by ``sqrt(1 - b2^t) / (1 -
        b1^t)``. The sup over t, doubled for rounding in the moments, plus 1 for gradients whose square
        underflows (their ``|m_hat| / eps`` is < 1e-10)."""
        b1, b2 = self.b1, self.b2
        if b1 > 0 and b1 * b1 >= b2:
            return None
        r = b1 * b1 / b2 if b1 > 0 else 0.0
        t = np.unique(np.concatenate([np.arange(1, 10_001), np.geomspace(1e4, 1e12, 2_000)]))
        series = (1.0 - r ** t) / (1.0 - r)
        ratio = (1 - b1) * np.sqrt(1 - b2 ** t) * np.sqrt(series) / ((1 - b1 ** t) * np.sqrt(1 - b2))
        limit = (1 - b1) / (np.sqrt(1 - b2) * np.sqrt(1 - r))
        return float(2 * max(ratio.max(), limit) + 1)

    def ok(self, params: Any, clipped_norm: jax.Array, lr: jax.Array) -> jax.Array:
        """bool []: an update at learning rate <= ``lr`` of ``params`` by gradients of global norm
        ``clipped_norm`` leaves parameters and moments finite (with an 8x margin on the largest float)."""
        big = min(float(jnp.finfo(x.dtype).max) for x in jax.tree.leaves(params)) / 8
        largest = jnp.max(jnp.stack([jnp.max(jnp.abs(x)).astype(jnp.float32) for x in jax.tree.leaves(params)]))
        # every squared gradient finite, so are both moments (v_hat <= the largest square seen)
        moments_ok = clipped_norm * clipped_norm <= big
        step = largest * (1 + lr * self.weight_decay) + lr * self.max_direction
        return moments_ok & (step <= big)  # an overflow on the way makes ``step`` inf or NaN: False


def all_finite(tree) -> jax.Array:
    """bool []: every floating-point leaf of ``tree`` is finite (integer leaves always are)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def guarded_apply(tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any, loss,
                  *, grad_clip: float, scale=None, bound: AdamWBound | None = None
                  ) -> tuple[Any, Any, dict[str, jax.Array]]:
    """``(params, opt_state, metrics)`` after one optimiser update (pure; jit it with the caller).

    The gradient is clipped to global norm ``grad_clip`` (0: no clip) and ``tx``'s update is
    multiplied by ``scale`` when given (a learning rate passed per call). A non-finite loss, gradient
    or result is never applied: params and optimiser state stay as they were, and
    ``metrics["nonfinite/<what>"]`` is 1 for what was not finite.

    With ``bound`` (``tx`` is that AdamW) the result is known finite before the update is made, so
    the update runs in place under ``lax.cond``; ``nonfinite/params`` then means the bound could not
    promise a finite result (a learning rate or weights near the float's range). Without it, the
    results are checked after, which keeps the old and new trees apart (two more copies of each).
    """
    grad_norm = optax.global_norm(grads)
    factor = jnp.minimum(1.0, grad_clip / (grad_norm + 1e-6)) if grad_clip > 0 else jnp.float32(1.0)

    def update(params, opt_state, grads):
        updates, new_opt_state = tx.update(jax.tree.map(lambda g: g * factor, grads), opt_state, params)
        if scale is not None:
            updates = jax.tree.map(lambda u: scale * u, updates)
        return optax.apply_updates(params, updates), new_opt_state

    finite = {"loss": jnp.isfinite(loss), "grad_norm": jnp.isfinite(grad_norm)}
    if bound is not None and bound.max_direction is not None:
        lr = bound.max_lr * (jnp.abs(scale) if scale is not None else 1.0)
        finite["params"] = bound.ok(params, grad_norm * factor, lr)
        ok = finite["loss"] & finite["grad_norm"] & finite["params"]
        params, opt_state = jax.lax.cond(ok, update, lambda p, s, g: (p, s), params, opt_state, grads)
    else:
        new_params, new_opt_state = update(params, opt_state, grads)
        finite["params"] = all_finite(new_params) & all_finite(new_opt_state)
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
