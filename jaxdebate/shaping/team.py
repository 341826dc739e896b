"""Plurality vote of a debate round and the team reward the strategies use (DESIGN §4), as pure
array functions.

A vote is *valid* when its turn is active and the vote is non-empty (>= 0); only valid votes count.
Ties share the win: when k answers tie for the most votes, the team reward is 1/k if gold is one of
them, else 0 — the expected win under a uniformly random tie-break. A fixed tie rule (for example
"the answer given first by the lowest-index agent", which the *reported* debate answer in
`jaxdebate.debate` keeps) would make credit depend on agent order.

k needs no argmax or distinct-answer count: each tied answer has exactly `best` voters, so
k = (valid voters holding the best count) / best. Every helper takes an explicit agent axis and
leaves it in place, so the strategies evaluate many (counterfactual) vote vectors at once as extra
array axes, without a loop.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def pair_equal(votes, valid, axis: int):
    """eq[.., b, c, ..] = agent c's vote is valid and equals agent b's (c inserted after `axis`)."""
    return (jnp.expand_dims(votes, axis + 1) == jnp.expand_dims(votes, axis)) & jnp.expand_dims(valid, axis)


def vote_counts(votes, valid, axis: int):
    """For each agent, how many valid votes equal its vote (itself included when valid), int32."""
    return jnp.sum(pair_equal(votes, valid, axis), axis=axis + 1, dtype=jnp.int32)


def tied_winners(valid, is_gold, counts, axis: int):
    """(gold_top bool, k int32) with `axis` reduced: gold is among the k answers tied for the most
    valid votes (k = 0 and gold_top False without a valid vote).

    valid: the vote counts; is_gold: valid and equal to gold; counts: `vote_counts` of each agent
    (only read where valid). All three share one shape.
    """
    best = jnp.max(jnp.where(valid, counts, 0), axis=axis)
    best_gold = jnp.max(jnp.where(is_gold, counts, 0), axis=axis)
    n_top = jnp.sum(valid & (counts == jnp.expand_dims(best, axis)), axis=axis, dtype=jnp.int32)
    return (best_gold == best) & (best > 0), n_top // jnp.maximum(best, 1)


def gold_share(valid, is_gold, counts, axis: int):
    """Team reward f32: 1/k where gold is among the k tied plurality answers over `axis`, else 0."""
    gold_top, k = tied_winners(valid, is_gold, counts, axis)
    return jnp.where(gold_top, 1.0 / jnp.maximum(k, 1).astype(jnp.float32), 0.0)


def share_unit(n_agents: int) -> int:
    """lcm(1..A): the team reward in these units, unit // k, is an integer for every tie size k."""
    return math.lcm(*range(1, n_agents + 1))


def gold_share_units(valid, is_gold, counts, axis: int, unit: int):
    """`gold_share` times `unit` (a multiple of every k, see `share_unit`) as an exact int32, so
    sums of team rewards are exact in any order."""
    gold_top, k = tied_winners(valid, is_gold, counts, axis)
    return jnp.where(gold_top, unit // jnp.maximum(k, 1), 0)


def plurality_agreement(votes, valid, present, axis: int):
    """Fraction of the `present` agents that voted for the plurality answer (0 with no valid vote).

    The PBRS `agreement` potential of round r is this measured on round r - 1 (present = the
    agents active in round r - 1), and 0 for round 0 (`strategies.potential_based`). Ties
    do not change it (every tied answer has the same count).
    """
    top = jnp.max(vote_counts(votes, valid, axis), axis=axis).astype(jnp.float32)
    n_present = jnp.sum(present, axis=axis, dtype=jnp.int32).astype(jnp.float32)
    return jnp.where(top > 0, top / jnp.maximum(n_present, 1.0), 0.0)


@jax.jit
def team_reward(votes, gold, active):
    """Team reward f32 [..., G, R] of each played round, with ties sharing the win: 1/k where gold
    is among the k answers tied for the most active, non-empty votes, else 0 (the expected win
    under a uniformly random tie-break; the strategies' team term, also logged as team accuracy).

    votes i32 [..., G, A, R], gold i32 [...], active bool [..., G, A, R]. gold < 0 or a round
    without a valid vote gives 0. Votes of inactive turns are ignored.
    """
    votes = jnp.asarray(votes)
    active = jnp.asarray(active, dtype=bool)
    gold = jnp.asarray(gold)[..., None, None, None]
    valid = active & (votes >= 0)
    is_gold = valid & (votes == gold) & (gold >= 0)
    axis = votes.ndim - 2
    return gold_share(valid, is_gold, vote_counts(votes, valid, axis), axis)
