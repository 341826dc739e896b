"""The clipped policy-gradient loss with a truncated importance weight and a k3 KL penalty.

Pure functions over token arrays ``[N, T]`` (N rows, T positions). Every quantity is defined per
completion token; ``token_weights`` carries the aggregation (``token``, ``sequence`` or ``sequence_sum``,
normalised over the whole training step), so summing the loss over micro-batches gives the full-batch
loss exactly.

Per completion token, with ``lp`` the current policy's log-prob, ``old`` the learner's log-prob before
the update, ``smp`` the sampler's and ``ref`` the reference policy's::

    pg    = policy-gradient term of loss.policy_loss (below)
    w     = min(exp(old - smp), cap)                      # truncated importance weight, no gradient
    kl    = exp(ref - lp) - (ref - lp) - 1                # k3 estimator of KL(policy || reference)
    loss  = sum_tokens token_weight * (w * pg + beta * kl)

The policy-gradient terms (``A`` the token's advantage, ``sg`` stop-gradient, ``clip`` to
``[1 - eps_low, 1 + eps_high]`` = ``[1 - loss.clip_eps, 1 + loss.clip_high]``)::

    ppo_clip  r = exp(lp - old)                            pg = -min(r * A, clip(r) * A)
    gspo      s_i = exp(mean_{t in seq i}(lp_t - old_t))   pg = -min(s_i * A, clip(s_i) * A)  on every token of i
    cispo     r = exp(lp - old)                            pg = -sg(clip(r)) * A * lp

On-policy (``lp == old``) all three give a token the gradient ``-token_weight * w * A`` (``gspo``: with
``w`` averaged over the sequence). The sampler-lag weight ``w`` and the KL stay per token in every
variant. Packed rows hold several sequences: ``gspo`` finds a token's sequence by the micro-batch's
``window_sequence``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

POLICY_LOSSES = ("ppo_clip", "gspo", "cispo")
AGGREGATIONS = ("token", "sequence", "sequence_sum")


class LossTerms(NamedTuple):
    """Per-token terms of the loss (``[N, T]`` each), before weighting."""

    pg: jax.Array
    kl: jax.Array
    ratio: jax.Array
    is_weight: jax.Array
    clipped: jax.Array
    capped: jax.Array


def clipped_surrogate(ratio, adv, *, clip_low: float, clip_high: float):
    """``(pg, clipped)``: PPO's pessimistic term ``-min(ratio * A, clip(ratio, 1 - clip_low,
    1 + clip_high) * A)``, and where its clip is active (the clipped branch is the smaller one and
    differs from the unclipped), i.e. where the token gets no gradient."""
    unclipped = ratio * adv
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = -jnp.minimum(unclipped, clipped_ratio * adv)
    return pg, (clipped_ratio * adv < unclipped) & (clipped_ratio != ratio)


def ppo_clip_pg(logprobs, old_logprobs, adv, sequence_ids=None, *, clip_low: float, clip_high: float):
    """``(pg, ratio, clipped)`` of the token-level clipped ratio (PPO/GRPO)::

        r  = exp(lp - old)
        pg = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)

    ``sequence_ids`` is unused (every token is its own unit)."""
    ratio = jnp.exp(logprobs - old_logprobs)
    pg, clipped = clipped_surrogate(ratio, adv, clip_low=clip_low, clip_high=clip_high)
    return pg, ratio, clipped


def sequence_means(x, sequence_ids):
    """``[N, T]``: each token's mean of ``x`` over the tokens of its row with its sequence id (0 where
    the id is 0: no sequence). Ids are per row, in ``[0, T]``; a row may hold several sequences (packed
    rows). Differentiable in ``x`` (a scatter-add and a gather per row)."""
    n_ids = x.shape[1] + 1

    def row(xr, ids):
        sums = jax.ops.segment_sum(xr, ids, num_segments=n_ids)
        counts = jax.ops.segment_sum(jnp.ones_like(xr), ids, num_segments=n_ids)
        return (sums / jnp.maximum(counts, 1.0))[ids]

    ids = jnp.asarray(sequence_ids, jnp.int32)
    return jnp.where(ids > 0, jax.vmap(row)(jnp.where(ids > 0, x, 0.0), ids), 0.0)


def gspo_pg(logprobs, old_logprobs, adv, sequence_ids=None, *, clip_low: float, clip_high: float):
    """``(pg, ratio, clipped)`` of GSPO (Zheng et al. 2025, Group Sequence Policy Optimization): one
    importance ratio per sequence, the geometric mean of its token ratios, clipped per sequence::

        s_i = exp(mean_{t in i}(lp_t - old_t)) = (pi(y_i) / pi_old(y_i)) ** (1 / |y_i|)
        pg  = -min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)   on every token of i

    The gradient flows through ``s_i`` into every token's ``lp`` (``d s_i / d lp_t = s_i / |y_i|``),
    as in the paper's sequence objective: with the sequence-constant ``token_weights`` of every
    aggregation, ``sum_t weight * pg`` has the gradient ``-weight * sg(s_i) * A_i`` per token while
    the clip is inactive (GSPO-token's form), and none for the whole sequence when it is active.
    ``ratio`` and ``clipped`` are the sequence's, on each of its tokens. ``sequence_ids`` ``[N, T]``
    (required): the token's sequence within its row (:func:`sequence_means`)."""
    if sequence_ids is None:
        raise ValueError("gspo needs sequence_ids (the micro-batch's window_sequence)")
    ratio = jnp.exp(sequence_means(logprobs - old_logprobs, sequence_ids))
    pg, clipped = clipped_surrogate(ratio, adv, clip_low=clip_low, clip_high=clip_high)
    return pg, ratio, clipped


def cispo_pg(logprobs, old_logprobs, adv, sequence_ids=None, *, clip_low: float, clip_high: float):
    """``(pg, ratio, clipped)`` of CISPO (MiniMax-M1, 2025): the importance weight is clipped and
    stop-gradient, and every token keeps its REINFORCE gradient (none is dropped by a clip)::

        r  = exp(lp - old)
        pg = -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * lp

    The bounds are ``loss.clip_eps`` / ``loss.clip_high``, the PPO fields (no separate IS-clip
    fields): the paper tunes only the upper bound (its ``eps_high^IS``) and leaves the lower one off
    (``eps_low^IS`` large); ``clip_eps`` near 1 (it must be < 1) comes closest. ``clipped``: the weight
    was clipped (``r`` outside the bounds, whatever the sign of ``A``); ``sequence_ids`` is unused."""
    ratio = jnp.exp(logprobs - old_logprobs)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
    clipped = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
    return -weight * adv * logprobs, ratio, clipped


PG_TERMS = {"ppo_clip": ppo_clip_pg, "gspo": gspo_pg, "cispo": cispo_pg}
assert tuple(PG_TERMS) == POLICY_LOSSES


def loss_terms(logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages, *,
               clip_low: float, clip_high: float, is_cap: float, variant: str = "ppo_clip",
               sequence_ids=None) -> LossTerms:
    """The per-token terms of the module docstring; ``advantages`` is ``[N]`` or ``[N, T]``;
    ``variant`` one of :data:`POLICY_LOSSES` (``gspo`` needs ``sequence_ids``)."""
    if variant not in PG_TERMS:
        raise ValueError(f"unknown policy loss {variant!r} ({', '.join(POLICY_LOSSES)})")
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    pg, ratio, clipped = PG_TERMS[variant](logprobs, old_logprobs, adv, sequence_ids,
                                           clip_low=clip_low, clip_high=clip_high)
    raw_w = jnp.exp(jax.lax.stop_gradient(old_logprobs - sampler_logprobs))
    is_weight = jnp.minimum(raw_w, is_cap)
    log_r = ref_logprobs - logprobs
    kl = jnp.exp(log_r) - log_r - 1.0
    return LossTerms(pg, kl, ratio, is_weight, clipped, raw_w > is_cap)


def policy_loss(logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages, token_weights,
                *, clip_low: float, clip_high: float, is_cap: float, beta: float, variant: str = "ppo_clip",
                sequence_ids=None):
    """``(loss, terms)``: the weighted sum of ``is_weight * pg + beta * kl`` over completion tokens
    (``token_weights`` is 0 elsewhere)."""
    terms = loss_terms(
        logprobs, old_logprobs, sampler_logprobs, ref_logprobs, advantages,
        clip_low=clip_low, clip_high=clip_high, is_cap=is_cap, variant=variant, sequence_ids=sequence_ids,
    )
    per_token = terms.is_weight * terms.pg + beta * terms.kl
    return jnp.sum(token_weights * per_token), terms


def token_weights(loss_mask: np.ndarray, aggregation: str, *, total_tokens: int, total_sequences: int,
                  max_completion: int | None = None) -> np.ndarray:
    """Weights that turn a sum over tokens into the configured mean over the whole training step.

    ``token``: every completion token of the step counts equally (``1 / total_tokens``).
    ``sequence``: each sequence's tokens average to its mean, and sequences count equally
    (``1 / (len_i * total_sequences)``).
    ``sequence_sum``: each sequence's token sum over a constant, then the mean over sequences
    (``1 / (max_completion * total_sequences)``; Dr. GRPO's normaliser: a token's weight does not
    depend on its sequence's length or the step's lengths). ``max_completion`` is the completion
    budget, the same every step (``sampler.max_new_tokens`` in training).
    """
    mask = np.asarray(loss_mask, np.float32)
    if aggregation == "token":
        return mask / max(total_tokens, 1)
    if aggregation == "sequence":
        lengths = mask.sum(axis=1, keepdims=True)
        return np.where(lengths > 0, mask / np.maximum(lengths, 1.0), 0.0) / max(total_sequences, 1)
    if aggregation == "sequence_sum":
        if max_completion is None or max_completion < 1:
            raise ValueError(f"sequence_sum needs max_completion >= 1, got {max_completion!r}")
        return mask / (float(max_completion) * max(total_sequences, 1))
    raise ValueError(f"unknown aggregation {aggregation!r} ({', '.join(AGGREGATIONS)})")


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
