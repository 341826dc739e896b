"""The DPO objective (Rafailov et al. 2023), sigmoid form, as pure array functions.

For a pair with chosen completion ``y_w`` and rejected ``y_l`` of prompt ``x``, with sequence
log-probabilities ``log π(y|x)`` (sum over completion tokens) of the policy π and the frozen reference:

    r_w = β (log π(y_w|x) − log π_ref(y_w|x)),   r_l = β (log π(y_l|x) − log π_ref(y_l|x))
    loss = −log σ(r_w − r_l)                     (mean over the batch)

``r_w``/``r_l`` are the implicit rewards; their difference is the reward margin, and "accuracy" is
the share of pairs with a positive margin.

:func:`objective_loss` adds the baselines of issue 28 on the same pairs: RPO (Pang et al. 2024),
``dpo + α · nll_w`` with ``nll_w = −log π(y_w|x) / |y_w|`` (the chosen completion's per-token NLL),
and SFT, ``nll_w`` alone. Every objective reports the same diagnostics, among them the likelihood
displacement ``logps/chosen_delta = log π(y_w|x) − log π_ref(y_w|x)`` (negative: the chosen
completion became less likely even if the margin grew) and its rejected counterpart.
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


OBJECTIVES = ("dpo", "rpo", "sft")


def objective_loss(
    policy_chosen: jax.Array,
    policy_rejected: jax.Array,
    ref_chosen: jax.Array,
    ref_rejected: jax.Array,
    chosen_tokens: jax.Array,
    *,
    objective: str = "dpo",
    beta: float = 0.1,
    rpo_alpha: float = 1.0,
    weights: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The training loss of ``objective`` (see the module docstring) on sequence log-probs ``[B]``
    and the chosen completions' token counts ``[B]``; returns (mean loss, metrics). ``loss`` is the
    objective's; ``dpo_loss`` and ``nll/chosen`` are reported for every objective."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    _, metrics = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, weights)
    nll = -policy_chosen / jnp.maximum(chosen_tokens.astype(policy_chosen.dtype), 1.0)
    w = jnp.ones_like(nll) if weights is None else weights.astype(nll.dtype)
    denom = jnp.maximum(jnp.sum(w), 1.0)
    nll_mean = jnp.sum(w * nll) / denom
    dpo_mean = metrics["loss"]
    loss = {"dpo": dpo_mean, "rpo": dpo_mean + rpo_alpha * nll_mean, "sft": nll_mean}[objective]
    metrics = {
        **metrics,
        "loss": loss,
        "dpo_loss": dpo_mean,
        "nll/chosen": nll_mean,
        "logps/chosen_delta": jnp.sum(w * (policy_chosen - ref_chosen)) / denom,
        "logps/rejected_delta": jnp.sum(w * (policy_rejected - ref_rejected)) / denom,
    }
    return loss, metrics
