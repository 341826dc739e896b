"""The DPO objective (Rafailov et al. 2023), sigmoid form, as pure array functions.

For a pair with chosen completion ``y_w`` and rejected ``y_l`` of prompt ``x``, with sequence
log-probabilities ``log π(y|x)`` (sum over completion tokens) of the policy π and the frozen reference:

    r_w = β (log π(y_w|x) − log π_ref(y_w|x)),   r_l = β (log π(y_l|x) − log π_ref(y_l|x))
    loss = −log σ(r_w − r_l)                     (mean over the batch)

``r_w``/``r_l`` are the implicit rewards; their difference is the reward margin, and "accuracy" is
the share of pairs with a positive margin.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sequence_logprobs(token_logprobs: jax.Array, completion_mask: jax.Array) -> jax.Array:
    """Sum of per-token log-probs over the completion tokens: ``[B, T] -> [B]``."""
    return jnp.sum(jnp.where(completion_mask, token_logprobs, 0.0), axis=-1)


def dpo_loss(
    policy_chosen: jax.Array,
    policy_rejected: jax.Array,
    ref_chosen: jax.Array,
    ref_rejected: jax.Array,
    beta: float,
    weights: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Sigmoid DPO loss on sequence log-probs ``[B]``; returns (mean loss, metrics).

    ``weights`` (``[B]``, 0/1) masks padding pairs out of every mean.
    """
    chosen_rewards = beta * (policy_chosen - ref_chosen)
    rejected_rewards = beta * (policy_rejected - ref_rejected)
    margins = chosen_rewards - rejected_rewards
    losses = -jax.nn.log_sigmoid(margins)
    w = jnp.ones_like(losses) if weights is None else weights.astype(losses.dtype)
    denom = jnp.maximum(jnp.sum(w), 1.0)

    def mean(x: jax.Array) -> jax.Array:
        return jnp.sum(w * x) / denom

    metrics = {
        "loss": mean(losses),
        "rewards/chosen": mean(chosen_rewards),
        "rewards/rejected": mean(rejected_rewards),
        "rewards/margin": mean(margins),
        "rewards/accuracy": mean((margins > 0).astype(losses.dtype)),
        "logps/chosen": mean(policy_chosen),
        "logps/rejected": mean(policy_rejected),
    }
    return metrics["loss"], metrics
