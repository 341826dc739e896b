"""The five credit-assignment strategies of DESIGN §4, each a pure jnp function over one group.

Every function maps a `Group` (correct/votes/active f32/i32/bool [G, A, R], gold i32 []) to shaped
f32 [G, A, R]; the caller zeroes inactive turns. No Python loop over rollouts, agents or rounds:
counterfactual vote vectors are laid out as extra array axes. The team reward they use shares a
tied win (1/k for k tied plurality answers including gold, `team.gold_share`), so no agent is
favoured by its index. What each strategy reduces to under each advantage grouping and credit mode
is tabulated in REDUCTIONS.md (tested in tests/shaping/test_reductions.py).

Numerics: identity, difference_rewards and coma_advantage are bit-exact against the float32 loop
reference (coma sums team rewards as exact integers while lcm(1..A) * G < 2^24, and its mean is a
true division, see below). potential_based and reward_mixing compute `a * b + c`, which XLA's CPU
backend may contract into a fused multiply-add (one rounding instead of two), so they can differ
from the reference in the last bit.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.shaping.registry import (
    Group,
    Param,
    in_half_open_unit,
    in_unit_interval,
    one_of,
    positive,
    register_strategy,
)
from jaxdebate.shaping.team import gold_share, gold_share_units, pair_equal, plurality_agreement, share_unit

POTENTIAL_TYPES = ("debate_length", "agreement")


class _Round(NamedTuple):
    """Per-rollout round statistics shared by the strategies (agent axis 1 of [G, A, R])."""

    valid: jnp.ndarray  # bool [G, A, R]: active and non-empty
    is_gold: jnp.ndarray  # bool [G, A, R]: valid and equal to gold (gold >= 0)
    eq: jnp.ndarray  # bool [G, b, c, R]: c's vote is valid and equals b's
    counts: jnp.ndarray  # i32 [G, A, R]: valid votes equal to each agent's vote
    team: jnp.ndarray  # f32 [G, R]: 1/k when gold is among the k tied plurality answers, else 0


def _round_stats(group: Group) -> _Round:
    valid = group.active & (group.votes >= 0)
    is_gold = valid & (group.votes == group.gold) & (group.gold >= 0)
    eq = pair_equal(group.votes, valid, axis=1)
    counts = jnp.sum(eq, axis=2, dtype=jnp.int32)
    return _Round(valid, is_gold, eq, counts, gold_share(valid, is_gold, counts, axis=1))


@register_strategy("identity")
def identity(group: Group, params) -> jnp.ndarray:
    """shaped = correct."""
    return group.correct.astype(jnp.float32)


@register_strategy("difference_rewards")
def difference_rewards(group: Group, params) -> jnp.ndarray:
    """shaped[g,a,r] = team[g,r] - team_without_a[g,r] (Wolpert & Tumer).

    Removing agent a's vote makes it empty (not counted); a round left without any vote is
    incorrect (team 0). Both team terms share tied wins.
    """
    st = _round_stats(group)
    n_agents = group.votes.shape[1]
    others = ~jnp.eye(n_agents, dtype=bool)[None, :, :, None]  # [1, a, b, 1]: b != a
    # axes [G, a, b, R]: agent a's vote removed, so b's count loses a's vote when they agree
    counts = st.counts[:, None] - jnp.transpose(st.eq, (0, 2, 1, 3))
    team_without = gold_share(st.valid[:, None] & others, st.is_gold[:, None] & others, counts, axis=2)
    return st.team[:, None, :] - team_without


@register_strategy(
    "potential_based",
    params=(Param("gamma", float, in_half_open_unit), Param("potential_type", str, one_of(*POTENTIAL_TYPES))),
)
def potential_based(group: Group, params) -> jnp.ndarray:
    """shaped = correct + gamma * Phi(next round of the agent) - Phi(this round) (Ng et al. 1999).

    Phi is a per-rollout potential of the state a turn of round r acts in, i.e. of what was said
    before round r: `debate_length` Phi(r) = -r/R; `agreement` Phi(0) = 0 (nothing said yet) and
    Phi(r) = the fraction of the agents active in round r - 1 that voted for round r - 1's plurality
    answer (0 when round r - 1 has no valid vote). The turn's own vote never enters its own Phi(r),
    so under return credit with discount == gamma the credit telescopes to the discounted return of
    correctness minus Phi(r), an action-independent, state-dependent baseline (REDUCTIONS.md).
    "Along each agent's rounds" is read as along the rounds the agent played: the next potential is
    Phi at the agent's next active round, and 0 after its last one. For the usual prefix-shaped
    activity (early stop, padding) this is exactly Phi(r + 1); with holes it keeps the telescoping
    invariant: sum_k gamma^k F(r_k) over the agent's active rounds r_0 < r_1 < ... equals -Phi(r_0).
    """
    gamma = params["gamma"]
    votes, active = group.votes, group.active
    n_rounds = votes.shape[-1]
    if params["potential_type"] == "debate_length":
        # A trace-time constant (R is static), rounded once per entry like the formula.
        rounds = np.arange(n_rounds, dtype=np.float32)
        phi_round = jnp.broadcast_to(-(rounds / np.float32(n_rounds)), votes.shape[:1] + (n_rounds,))
    else:
        valid = active & (votes >= 0)
        agreement = plurality_agreement(votes, valid, active, axis=1)  # [G, R]: of each round's votes
        # Phi(r) = the agreement of round r - 1 (the state round r acts in); Phi(0) = 0.
        phi_round = jnp.concatenate([jnp.zeros_like(agreement[:, :1]), agreement[:, :-1]], axis=1)
    phi = jnp.where(active, phi_round[:, None, :], 0.0)  # [G, A, R]
    # nxt[.., r, r']: r' is the agent's next active round after r (active, later, none between).
    r = np.arange(n_rounds)
    after = r[None, :] > r[:, None]  # [r, r']
    between = (r[:, None, None] < r) & (r < r[None, :, None])  # [r, r', r'']: r < r'' < r'
    none_between = ~jnp.any(active[..., None, None, :] & between, axis=-1)
    nxt = active[..., None, :] & after & none_between
    phi_next = jnp.sum(jnp.where(nxt, phi[..., None, :], 0.0), axis=-1)
    return group.correct.astype(jnp.float32) + gamma * phi_next - phi


@register_strategy(
    "coma_advantage",
    params=(Param("n_rollouts_per_prompt", int, positive),),
    group_size_param="n_rollouts_per_prompt",
    config_name="coma",
)
def coma_advantage(group: Group, params) -> jnp.ndarray:
    """shaped[g,a,r] = team[g,r] - mean_j team(votes[g,:,r] with agent a's vote := votes[j,a,r]).

    Critic-free COMA (Foerster et al. 2018): the mean runs over the rollouts j in which agent a
    played round r (g included). With one agent it is correct - mean_g(correct).
    """
    st = _round_stats(group)
    votes, active = group.votes, group.active
    n_agents = votes.shape[1]
    # axes [g, a, j, b, r]: in rollout g, agent a's vote replaced by its vote in rollout j
    is_a = jnp.eye(n_agents, dtype=bool)[None, :, None, :, None]

    def from_j(x):  # x[j, a, r] -> [1, a, j, 1, r]
        return jnp.transpose(x, (1, 0, 2))[None, :, :, None, :]

    w_valid = from_j(st.valid)
    cross = (votes[:, None, None] == from_j(votes)) & w_valid  # b's vote in g == a's vote in j
    own = jnp.transpose(st.eq, (0, 2, 1, 3))[:, :, None]  # b's vote in g == a's vote in g
    # counts of the substituted vector: others' counts lose a's old vote and gain the new one;
    # a's own count is 1 + the others voting like it
    others_like_w = jnp.sum(cross & st.valid[:, None, None] & ~is_a, axis=3, keepdims=True, dtype=jnp.int32)
    cf_counts = jnp.where(is_a, others_like_w + 1, st.counts[:, None, None] - own + cross)
    cf_valid = jnp.where(is_a, w_valid, st.valid[:, None, None])
    cf_gold = jnp.where(is_a, from_j(st.is_gold), st.is_gold[:, None, None])
    # Team rewards in exact integer units (1/k == unit // k / unit), so the sum over j is exact.
    unit = share_unit(n_agents)
    team_cf = gold_share_units(cf_valid, cf_gold, cf_counts, axis=3, unit=unit)  # [g, a, j, r]
    played = jnp.transpose(active, (1, 0, 2))[None]  # [1, a, j, r]: agent a played round r in j
    total = jnp.sum(jnp.where(played, team_cf, 0), axis=2).astype(jnp.float32)  # [g, a, r]
    count = jnp.sum(played, axis=2, dtype=jnp.int32)  # [1, a, r]
    # The barrier keeps a true IEEE division: XLA rewrites x / broadcast(y) as x * (1 / y), which
    # is an ulp off (e.g. 2/3) and would break exact agreement with the reference.
    den = (unit * jnp.maximum(count, 1)).astype(jnp.float32)
    den = jax.lax.optimization_barrier(jnp.broadcast_to(den, total.shape))
    return st.team[:, None, :] - total / den


@register_strategy("reward_mixing", params=(Param("alpha", float, in_unit_interval),))
def reward_mixing(group: Group, params) -> jnp.ndarray:
    """shaped = alpha * correct + (1 - alpha) * team[g, r]; alpha = 1 is identity, 0 the team reward."""
    alpha = params["alpha"]
    return alpha * group.correct.astype(jnp.float32) + (1.0 - alpha) * _round_stats(group).team[:, None, :]
