"""Plain Python/NumPy loop reference of DESIGN §4 (reward shaping), written straight from the text.

Used by tests/shaping/ (exact agreement with the jitted strategies) and bench/shaping.py (the
peer the benchmark measures against). One group at a time, explicit loops over rollouts, agents and
rounds, float32 arithmetic in the same operation order as the formulas so results match bit for bit
(team rewards are exact fractions, rounded to float32 once). Readings of the spec chosen here are the
ones documented in jaxdebate/shaping/strategies.py.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

F = np.float32


def f32(x: Fraction) -> np.float32:
    """The float32 nearest to an exact fraction (one correctly rounded division of exact operands)."""
    assert x.numerator < 2**24 and x.denominator < 2**24
    return F(x.numerator) / F(x.denominator)


def tied_answers(vote_list):
    """The answers with the most votes among [(agent, vote)] (valid votes only); [] when empty."""
    counts: dict[int, int] = {}
    for _, vote in vote_list:
        counts[vote] = counts.get(vote, 0) + 1
    best = max(counts.values(), default=0)
    return [v for v, n in counts.items() if n == best]


def team_share(vote_list, gold) -> Fraction:
    """Team reward as an exact fraction: a tied plurality shares its win, 1/k if gold is one of the
    k tied answers, else 0 (the expected win under a uniformly random tie-break)."""
    top = tied_answers(vote_list)
    return Fraction(1, len(top)) if gold >= 0 and gold in top else Fraction(0)


def round_votes(votes, active, g, r, replace=None):
    """Valid (agent, vote) pairs of round r in rollout g; `replace=(a, vote_or_None)` swaps agent a's."""
    out = []
    n_agents = votes.shape[1]
    for b in range(n_agents):
        if replace is not None and b == replace[0]:
            vote = replace[1]
            if vote is not None and vote >= 0:
                out.append((b, int(vote)))
            continue
        if active[g, b, r] and votes[g, b, r] >= 0:
            out.append((b, int(votes[g, b, r])))
    return out


def team_of(vote_list, gold) -> F:
    return f32(team_share(vote_list, gold))


def team_group(votes, gold, active):
    """team[g, r] for one group."""
    n_rollouts, _, n_rounds = votes.shape
    team = np.zeros((n_rollouts, n_rounds), np.float32)
    for g in range(n_rollouts):
        for r in range(n_rounds):
            team[g, r] = team_of(round_votes(votes, active, g, r), int(gold))
    return team


def _turns(active):
    n_rollouts, n_agents, n_rounds = active.shape
    for g in range(n_rollouts):
        for a in range(n_agents):
            for r in range(n_rounds):
                if active[g, a, r]:
                    yield g, a, r


def identity(correct, votes, gold, active):
    out = np.zeros(correct.shape, np.float32)
    for g, a, r in _turns(active):
        out[g, a, r] = F(correct[g, a, r])
    return out


def difference_rewards(correct, votes, gold, active):
    team = team_group(votes, gold, active)
    out = np.zeros(correct.shape, np.float32)
    for g, a, r in _turns(active):
        without = team_of(round_votes(votes, active, g, r, replace=(a, None)), int(gold))
        out[g, a, r] = team[g, r] - without
    return out


def round_potential(votes, active, g, r, potential_type, n_rounds):
    """Phi(g, r): a function of what was said before round r. debate_length: -r/R. agreement: 0 for
    round 0; else the fraction of the agents active in round r - 1 that voted for round r - 1's
    plurality answer (0 when round r - 1 has no valid vote)."""
    if potential_type == "debate_length":
        return -(F(r) / F(n_rounds))
    if r == 0:
        return F(0.0)  # nothing has been said before round 0
    prev = r - 1
    present = [b for b in range(votes.shape[1]) if active[g, b, prev]]
    valid = round_votes(votes, active, g, prev)
    top = tied_answers(valid)
    if not top:
        return F(0.0)
    agreeing = sum(1 for _, v in valid if v == top[0])  # every tied answer has the same count
    return F(agreeing) / F(len(present))


def potential_based(correct, votes, gold, active, gamma, potential_type):
    n_rollouts, n_agents, n_rounds = correct.shape
    gamma = F(gamma)
    out = np.zeros(correct.shape, np.float32)
    for g in range(n_rollouts):
        for a in range(n_agents):
            played = [r for r in range(n_rounds) if active[g, a, r]]
            for k, r in enumerate(played):
                phi = round_potential(votes, active, g, r, potential_type, n_rounds)
                if k + 1 < len(played):
                    phi_next = round_potential(votes, active, g, played[k + 1], potential_type, n_rounds)
                else:
                    phi_next = F(0.0)  # Phi = 0 after the agent's last active round
                out[g, a, r] = F(correct[g, a, r]) + gamma * phi_next - phi
    return out


def coma_advantage(correct, votes, gold, active, n_rollouts_per_prompt):
    n_rollouts = correct.shape[0]
    if n_rollouts_per_prompt != n_rollouts:
        raise ValueError("n_rollouts_per_prompt must equal G")
    team = team_group(votes, gold, active)
    out = np.zeros(correct.shape, np.float32)
    for g, a, r in _turns(active):
        total, count = Fraction(0), 0
        for j in range(n_rollouts):
            if not active[j, a, r]:
                continue
            swapped = round_votes(votes, active, g, r, replace=(a, int(votes[j, a, r])))
            total += team_share(swapped, int(gold))
            count += 1
        out[g, a, r] = team[g, r] - f32(total / count)
    return out


def reward_mixing(correct, votes, gold, active, alpha):
    alpha = F(alpha)
    team = team_group(votes, gold, active)
    out = np.zeros(correct.shape, np.float32)
    for g, a, r in _turns(active):
        out[g, a, r] = alpha * F(correct[g, a, r]) + (F(1.0) - alpha) * team[g, r]
    return out


REFERENCE = {
    "identity": identity,
    "difference_rewards": difference_rewards,
    "potential_based": potential_based,
    "coma_advantage": coma_advantage,
    "reward_mixing": reward_mixing,
}


def credit_of(shaped, active, credit="turn", discount=1.0):
    """Per-turn credit [G, A, R] of one group's shaped rewards. `turn`: the shaped reward itself;
    `return`: sum over the agent's active rounds t >= r of discount^(t - r) * shaped[g, a, t], summed
    from the last round back (C = s_t + discount * C), the order that makes it exact in float32."""
    if credit == "turn":
        return np.where(active, shaped, F(0.0)).astype(np.float32)
    assert credit == "return", credit
    discount = F(discount)
    n_rollouts, n_agents, n_rounds = shaped.shape
    out = np.zeros(shaped.shape, np.float32)
    for g in range(n_rollouts):
        for a in range(n_agents):
            acc = F(0.0)
            for r in reversed(range(n_rounds)):
                acc = (F(shaped[g, a, r]) if active[g, a, r] else F(0.0)) + discount * acc
                out[g, a, r] = acc if active[g, a, r] else F(0.0)
    return out


def shape_group(strategy, params, correct, votes, gold, active, credit="turn", discount=1.0):
    """Reference per-turn credit [G, A, R] for one group (shaped rewards under credit="turn")."""
    active = np.asarray(active)
    shaped = REFERENCE[strategy](np.asarray(correct), np.asarray(votes), int(gold), active, **params)
    return credit_of(shaped, active, credit, discount)


def shape_batch(strategy, params, correct, votes, gold, active, credit="turn", discount=1.0):
    """Reference over a batch [B, G, A, R], one group at a time."""
    out = np.zeros(np.shape(correct), np.float32)
    for b in range(np.shape(correct)[0]):
        out[b] = shape_group(strategy, params, correct[b], votes[b], gold[b], active[b], credit, discount)
    return out


ZERO_SIGNAL_TOL = 1e-6  # DESIGN §4 filter/advantage tolerance; must equal advantages.ZERO_SIGNAL_TOL


def zero_signal(xs) -> bool:
    """A group's credits are equal up to float32 rounding: hi - lo <= tol * max(1, |hi|, |lo|)."""
    hi, lo = max(xs), min(xs)
    return hi - lo <= ZERO_SIGNAL_TOL * max(1.0, abs(hi), abs(lo))


def advantages(shaped, active, estimator, grouping, eps=1e-6):
    """Reference advantages (float64 loops) for [B, G, A, R]; exactly 0 in a zero-signal group."""
    shaped = np.asarray(shaped, np.float64)
    n_b, n_g, n_a, n_r = shaped.shape
    if grouping == "prompt":
        groups = [[(b, g, a, r) for g in range(n_g) for a in range(n_a) for r in range(n_r)] for b in range(n_b)]
    else:
        groups = [[(b, g, a, r) for g in range(n_g)] for b in range(n_b) for a in range(n_a) for r in range(n_r)]
    out = np.zeros(shaped.shape, np.float64)
    for members in groups:
        members = [m for m in members if active[m]]
        xs = [shaped[m] for m in members]
        n = len(xs)
        if n == 0 or zero_signal(xs):
            continue  # no signal: every advantage of the group stays 0
        for m, x in zip(members, xs):
            if estimator == "grpo":
                mean = sum(xs) / n
                std = (sum((y - mean) ** 2 for y in xs) / n) ** 0.5
                out[m] = (x - mean) / (std + eps)
            else:
                out[m] = 0.0 if n == 1 else x - (sum(xs) - x) / (n - 1)
    return out


MASK_KINDS = ("full", "early_stop", "padding", "random")


def random_batch(rng, n_groups, n_rollouts, n_agents, n_rounds, *, mask="early_stop", n_classes=3,
                 consistent=True):
    """Random (correct, votes, gold, active) for [B, G, A, R] groups, as a debate env would produce.

    mask: "full"; "early_stop" (rollout g plays rounds < L_g for every agent); "padding" (early stop,
    plus whole agents and per-agent trailing rounds inactive); "random" (any pattern, holes included).
    Inactive turns hold garbage votes/correctness, which every consumer must ignore. With
    `consistent`, correct = (vote == gold >= 0) on active turns; otherwise random 0/1.
    """
    shape = (n_groups, n_rollouts, n_agents, n_rounds)
    votes = rng.integers(-1, n_classes, shape).astype(np.int32)
    gold = rng.integers(-1, n_classes, n_groups).astype(np.int32)
    rounds = np.arange(n_rounds)
    if mask == "full":
        active = np.ones(shape, bool)
    elif mask == "random":
        active = rng.random(shape) < rng.uniform(0.3, 0.9)
    else:
        stop = rng.integers(1, n_rounds + 1, (n_groups, n_rollouts, 1, 1))
        active = np.broadcast_to(rounds < stop, shape).copy()
        if mask == "padding":
            agent_stop = rng.integers(0, n_rounds + 1, (n_groups, n_rollouts, n_agents, 1))
            active &= rounds < agent_stop
    if consistent:
        correct = ((votes == gold[:, None, None, None]) & (gold[:, None, None, None] >= 0)).astype(np.float32)
    else:
        correct = rng.integers(0, 2, shape).astype(np.float32)
    garbage_votes = rng.integers(-1, n_classes, shape).astype(np.int32)
    garbage_correct = rng.integers(0, 2, shape).astype(np.float32)
    votes = np.where(active, votes, garbage_votes)
    correct = np.where(active, correct, garbage_correct)
    return correct, votes, gold, active


def mixed_batch(seed: int, n_groups: int, n_rollouts: int, n_agents: int, n_rounds: int):
    """Groups of one shape, each with its own activity pattern, vote alphabet and correctness mode."""
    rng = np.random.default_rng(seed)
    parts = [
        random_batch(
            rng, 1, n_rollouts, n_agents, n_rounds,
            mask=MASK_KINDS[rng.integers(len(MASK_KINDS))],
            n_classes=int(rng.integers(1, 5)),
            consistent=i == 0 or bool(rng.random() < 0.7),  # group 0 always graded from its votes
        )
        for i in range(n_groups)
    ]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


# Strategies computing a * b + c: XLA may contract it into a fused multiply-add, whose single rounding
# can differ from this reference's separate multiply and add by one ulp.
FMA_STRATEGIES = {"potential_based", "reward_mixing"}


def configs(n_rollouts: int) -> list[tuple[str, dict]]:
    """One (strategy, params) per built-in and potential type: what the shaping tests sweep."""
    return [
        ("identity", {}),
        ("difference_rewards", {}),
        ("potential_based", {"gamma": 0.9, "potential_type": "debate_length"}),
        ("potential_based", {"gamma": 0.73, "potential_type": "agreement"}),
        ("coma_advantage", {"n_rollouts_per_prompt": n_rollouts}),
        ("reward_mixing", {"alpha": 0.3}),
    ]
