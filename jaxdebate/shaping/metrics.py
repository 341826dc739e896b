"""Reward metrics for logging: raw vs shaped means overall, per agent, per round; team accuracy; the
per-agent scale of the advantages."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _masked_mean(x, mask, axis=None):
    mask = mask.astype(jnp.float32)
    n = jnp.sum(mask, axis=axis)
    return jnp.where(n > 0, jnp.sum(x * mask, axis=axis) / jnp.maximum(n, 1.0), 0.0)


@jax.jit
def reward_metrics(correct, shaped, team, active) -> dict[str, jax.Array]:
    """Scalar metrics over active turns (a mean with no active turn is 0).

    correct/shaped f32 [B, G, A, R], team f32 [B, G, R], active bool [B, G, A, R]. Keys (stable for
    given A, R): reward/{raw,shaped}/mean, reward/{raw,shaped}/agent_{a}, reward/{raw,shaped}/round_{r},
    accuracy/team (team reward of each played debate's last played round: the debate's answer, a
    tie counted as its expected win 1/k), accuracy/team/round_{r} (over the debates that played
    round r). `shaped` is the per-turn credit `shape_rewards` returns (the return under credit="return").
    """
    correct = jnp.asarray(correct, jnp.float32)
    shaped = jnp.asarray(shaped, jnp.float32)
    team = jnp.asarray(team, jnp.float32)
    active = jnp.asarray(active, bool)
    n_agents, n_rounds = active.shape[-2], active.shape[-1]
    out: dict[str, jax.Array] = {}
    for kind, x in (("raw", correct), ("shaped", shaped)):
        out[f"reward/{kind}/mean"] = _masked_mean(x, active)
        per_agent = _masked_mean(x, active, axis=(0, 1, 3))
        per_round = _masked_mean(x, active, axis=(0, 1, 2))
        for a in range(n_agents):
            out[f"reward/{kind}/agent_{a}"] = per_agent[a]
        for r in range(n_rounds):
            out[f"reward/{kind}/round_{r}"] = per_round[r]
    round_played = jnp.any(active, axis=-2)  # [B, G, R]
    seen = jnp.cumsum(round_played, axis=-1)
    last = round_played & (seen == seen[..., -1:])  # the last played round of each debate
    out["accuracy/team"] = _masked_mean(team, last)
    per_round_team = _masked_mean(team, round_played, axis=(0, 1))
    for r in range(n_rounds):
        out[f"accuracy/team/round_{r}"] = per_round_team[r]
    return out


@jax.jit
def advantage_metrics(advantages, active) -> dict[str, jax.Array]:
    """Per-agent advantage scale over active turns: ``advantage_abs_mean/agent_{a}`` (mean |A|) and
    ``advantage_std/agent_{a}`` (population std of A) for advantages f32 [B, G, A, R] and active bool
    [B, G, A, R] (0 for an agent with no active turn). An agent whose advantages are much larger than
    the others' dominates the update; ``loss.per_agent_norm`` evens this out."""
    adv = jnp.asarray(advantages, jnp.float32)
    active = jnp.asarray(active, bool)
    axes = (0, 1, 3)
    abs_mean = _masked_mean(jnp.abs(adv), active, axis=axes)
    mean = _masked_mean(adv, active, axis=axes)
    var = _masked_mean(jnp.square(adv - mean[:, None]), active, axis=axes)
    out: dict[str, jax.Array] = {}
    for a in range(active.shape[-2]):
        out[f"advantage_abs_mean/agent_{a}"] = abs_mean[a]
        out[f"advantage_std/agent_{a}"] = jnp.sqrt(var[a])
    return out
