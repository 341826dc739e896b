"""The clipped policy-gradient loss with a truncated importance weight and a k3 KL penalty.

Pure functions over token arrays ``[N, T]`` (N sequences, T positions). Every quantity is defined per
completion token; ``token_weights`` carries the aggregation (token- or sequence-level, normalised over
the whole training step), so summing the loss over micro-batches gives the full-batch loss exactly.

Per completion token, with ``lp`` the current policy's log-prob, ``old`` the learner's log-prob before
the update, ``smp`` the sampler's and ``ref`` the reference policy's::

    ratio = exp(lp - old)
    pg    = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
    w     = min(exp(old - smp), cap)                      # truncated importance weight, no gradient
    kl    = exp(ref - lp) - (ref - lp) - 1                # k3 estimator of KL(policy || reference)
    loss  = sum_tokens token_weight * (w * pg + beta * kl)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class LossTerms(NamedTuple):
    """Per-token terms of the loss (``[N, T]`` each), before weighting."""

    pg: jax.Array
    kl: jax.Array
    ratio: jax.Array
    is_weight: jax.Array
    clipped: jax.Array
    capped: jax.Array


def loss_terms(logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages, *,
               clip_low: float, clip_high: float, is_cap: float) -> LossTerms:
    """The per-token terms of the module docstring; ``advantages`` is ``[N]`` or ``[N, T]``."""
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    ratio = jnp.exp(logprobs - old_logprobs)
    unclipped = ratio * adv
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = -jnp.minimum(unclipped, clipped_ratio * adv)
    # the clip is active where the clipped branch is the smaller (pessimistic) one and differs
    clipped = (clipped_ratio * adv < unclipped) & (clipped_ratio != ratio)
    raw_w = jnp.exp(jax.lax.stop_gradient(old_logprobs - sampler_logprobs))
    is_weight = jnp.minimum(raw_w, is_cap)
    log_r = ref_logprobs - logprobs
    kl = jnp.exp(log_r) - log_r - 1.0
    return LossTerms(pg, kl, ratio, is_weight, clipped, raw_w > is_cap)


def policy_loss(logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages, token_weights,
                *, clip_low: float, clip_high: float, is_cap: float, beta: float):
    """``(loss, terms)``: the weighted sum of ``is_weight * pg + beta * kl`` over completion tokens
    (``token_weights`` is 0 elsewhere)."""
    terms = loss_terms(
        logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages,
        clip_low=clip_low, clip_high=clip_high, is_cap=is_cap,
    )
    per_token = terms.is_weight * terms.pg + beta * terms.kl
    return jnp.sum(token_weights * per_token), terms


def token_weights(loss_mask: np.ndarray, aggregation: str, *, total_tokens: int, total_sequences: int
                  ) -> np.ndarray:
    """Weights that turn a sum over tokens into the configured mean over the whole training step.

    ``token``: every completion token of the step counts equally (``1 / total_tokens``).
    ``sequence``: each sequence's tokens average to its mean, and sequences count equally
    (``1 / (len_i * total_sequences)``).
    """
    mask = np.asarray(loss_mask, np.float32)
    if aggregation == "token":
        return mask / max(total_tokens, 1)
    if aggregation == "sequence":
        lengths = mask.sum(axis=1, keepdims=True)
        return np.where(lengths > 0, mask / np.maximum(lengths, 1.0), 0.0) / max(total_sequences, 1)
    raise ValueError(f"unknown aggregation {aggregation!r} (token or sequence)")


def metric_sums(terms: LossTerms, loss_mask, old_logprobs, sampler_logprobs, entropy=None):
    """Sums over completion tokens of the learner metrics (combined across micro-batches, then divided
    by ``tokens``). The sampler/learner mismatch is ``old - sampler`` (log space)."""
    m = loss_mask.astype(jnp.float32)
    delta = (old_logprobs - sampler_logprobs) * m
    sums = {
        "tokens": jnp.sum(m),
        "kl": jnp.sum(terms.kl * m),
        "ratio": jnp.sum(terms.ratio * m),
        "clip_fraction": jnp.sum(terms.clipped * m),
        "is_weight": jnp.sum(terms.is_weight * m),
        "is_capped_fraction": jnp.sum(terms.capped * m),
        "logprob_mismatch": jnp.sum(delta),
        "logprob_abs_mismatch": jnp.sum(jnp.abs(delta)),
    }
    if entropy is not None:
        sums["entropy"] = jnp.sum(entropy * m)
    maxes = {"logprob_max_abs_mismatch": jnp.max(jnp.abs(delta))}
    return sums, maxes
