"""Plurality vote of a debate round and the team reward (DESIGN §3-4), as pure array functions.

A vote is *valid* when its turn is active and the vote is non-empty (>= 0); only valid votes count.
Ties: among the tied answers, the one given first by the lowest-index agent wins (DESIGN §3).

The winner is found without argmax: agent b gets the key `count_b * (A + 1) + (A - b)`, which is
largest exactly for the first agent holding the largest count, so "the plurality answer is gold"
is "the best key among gold voters equals the best key among all valid voters". Every helper takes
an explicit agent axis and leaves it in place, so the strategies evaluate many (counterfactual) vote
vectors at once as extra array axes, without a loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _along(n: int, ndim: int, axis: int):
    """arange(n) shaped to broadcast along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = n
    return jnp.arange(n, dtype=jnp.int32).reshape(shape)


def pair_equal(votes, valid, axis: int):
    """eq[.., b, c, ..] = agent c's vote is valid and equals agent b's (c inserted after `axis`)."""
    return (jnp.expand_dims(votes, axis + 1) == jnp.expand_dims(votes, axis)) & jnp.expand_dims(valid, axis)


def vote_counts(votes, valid, axis: int):
    """For each agent, how many valid votes equal its vote (itself included when valid), int32."""
    return jnp.sum(pair_equal(votes, valid, axis), axis=axis + 1, dtype=jnp.int32)


def gold_wins(valid, is_gold, counts, axis: int):
    """f32 1.0 where the plurality answer over `axis` is gold; 0 when no valid vote is gold.

    valid: the vote counts; is_gold: valid and equal to gold; counts: `vote_counts` of each agent
    (only read where valid). All three share one shape; `axis` is reduced.
    """
    n = valid.shape[axis]
    key = counts * (n + 1) + (n - _along(n, valid.ndim, axis))  # >= 1 for a valid vote
    best = jnp.max(jnp.where(valid, key, 0), axis=axis)
    best_gold = jnp.max(jnp.where(is_gold, key, 0), axis=axis)
    return ((best_gold == best) & (best_gold > 0)).astype(jnp.float32)


def plurality_is_gold(votes, valid, gold, axis: int):
    """f32 1.0 where the plurality of the valid votes over `axis` equals `gold` (gold >= 0).

    `gold` must broadcast against `votes`. No valid vote, or gold < 0, gives 0.
    """
    is_gold = valid & (votes == gold) & (gold >= 0)
    return gold_wins(valid, is_gold, vote_counts(votes, valid, axis), axis)


def plurality_agreement(votes, valid, present, axis: int):
    """Fraction of the `present` agents that voted for the plurality answer (0 with no valid vote).

    This is the `agreement` potential of DESIGN §4: present = the agents active in the round.
    """
    top = jnp.max(vote_counts(votes, valid, axis), axis=axis).astype(jnp.float32)
    n_present = jnp.sum(present, axis=axis, dtype=jnp.int32).astype(jnp.float32)
    return jnp.where(top > 0, top / jnp.maximum(n_present, 1.0), 0.0)


@jax.jit
def team_reward(votes, gold, active):
    """Team reward [..., G, R]: 1.0 where the plurality of the active, non-empty votes equals gold.

    votes i32 [..., G, A, R], gold i32 [...], active bool [..., G, A, R]. gold < 0 or a round
    without a valid vote gives 0. Votes of inactive turns are ignored.
    """
    votes = jnp.asarray(votes)
    active = jnp.asarray(active, dtype=bool)
    gold = jnp.asarray(gold)[..., None, None, None]
    valid = active & (votes >= 0)
    return plurality_is_gold(votes, valid, gold, axis=votes.ndim - 2)
