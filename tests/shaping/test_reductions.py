"""Each row of jaxdebate/shaping/REDUCTIONS.md, checked numerically through shape_rewards and
compute_advantages: what every strategy's per-turn credit reduces to under each credit mode and
advantage grouping."""

from __future__ import annotations

import numpy as np
import pytest

import shaping_reference as ref
from jaxdebate.shaping import ShapingConfig, compute_advantages, sample_filter, shape_rewards, team_reward

GROUPINGS = ("prompt", "agent_round")
ESTIMATORS = ("grpo", "rloo")
GAMMA = 0.9


def batch(seed, shape, mask="early_stop", empty_votes=True):
    """Random groups graded from their votes (correct = vote == gold >= 0); gold always sampled."""
    rng = np.random.default_rng(seed)
    correct, votes, gold, active = ref.random_batch(rng, *shape, mask=mask)
    if not empty_votes:
        votes = np.abs(votes)
    gold = np.abs(gold)
    correct = (votes == gold[:, None, None, None]).astype(np.float32)
    return correct, votes, gold, active


def credit(strategy, params, arrays, mode="turn", discount=1.0):
    cfg = ShapingConfig(strategy, params, credit=mode, discount=discount)
    return np.asarray(shape_rewards(cfg, *arrays))


def advantages(x, active, estimator, grouping):
    return np.asarray(compute_advantages(x, active, estimator=estimator, grouping=grouping))


def spread(x, active, grouping):
    """max - min of each group's active members, broadcast to [B, G, A, R]."""
    axes = (1, 2, 3) if grouping == "prompt" else (1,)
    hi = np.max(np.where(active, x, -np.inf), axis=axes, keepdims=True)
    lo = np.min(np.where(active, x, np.inf), axis=axes, keepdims=True)
    return np.broadcast_to(np.where(np.isfinite(hi - lo), hi - lo, 0.0), x.shape)


def assert_same_advantages(x, y, active, groupings=GROUPINGS):
    """Same advantages from credits x and y, on every active turn. A group where y is constant may
    be constant in x only up to float32 rounding; the shared zero-signal tolerance makes it
    zero-signal all the same (filtered, advantages exactly 0 under both estimators)."""
    for grouping in groupings:
        flat = spread(y, active, grouping) == 0
        assert np.all(spread(x, active, grouping)[flat] < 1e-5)
        keep, _ = sample_filter(x, active, np.zeros(active.shape, bool), grouping=grouping)
        assert not np.any(np.asarray(keep)[flat & active]), f"{grouping}: a constant group is kept"
        for estimator in ESTIMATORS:
            adv_x = advantages(x, active, estimator, grouping)
            assert np.all(adv_x[flat] == 0.0), f"{estimator}/{grouping}: rounding noise became signal"
            np.testing.assert_allclose(adv_x[active], advantages(y, active, estimator, grouping)[active],
                                       rtol=0, atol=2e-5, err_msg=f"{estimator}/{grouping}")


def discounted(x, active, d):
    """sum over active t >= r of d^(t - r) x[.., t], float64."""
    out = np.zeros(x.shape)
    acc = np.zeros(x.shape[:-1])
    for r in reversed(range(x.shape[-1])):
        acc = np.where(active[..., r], x[..., r], 0.0) + d * acc
        out[..., r] = np.where(active[..., r], acc, 0.0)
    return out


def potential(arrays, kind):
    """Phi(g, r) on every active turn [B, G, A, R] (the reference's), 0 elsewhere."""
    _, votes, _, active = arrays
    out = np.zeros(active.shape)
    for b, g, a, r in zip(*np.nonzero(active)):
        out[b, g, a, r] = ref.round_potential(votes[b], active[b], g, r, kind, active.shape[-1])
    return out


@pytest.mark.parametrize("mode, d", [("turn", 1.0), ("return", 0.8)])
def test_identity_is_own_correctness_or_its_discounted_return(mode, d):
    arrays = batch(0, (4, 4, 3, 3), mask="padding")
    c, active = arrays[0], arrays[3]
    expected = np.where(active, c, 0.0) if mode == "turn" else discounted(c, active, d)
    np.testing.assert_allclose(credit("identity", {}, arrays, mode, d), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["turn", "return"])
@pytest.mark.parametrize("mask", ["early_stop", "padding", "random"])
def test_one_agent_difference_rewards_and_reward_mixing_are_identity(mode, mask):
    arrays = batch(1, (5, 4, 1, 3), mask=mask)
    identity = credit("identity", {}, arrays, mode, 0.8)
    np.testing.assert_array_equal(credit("difference_rewards", {}, arrays, mode, 0.8), identity)
    for alpha in (0.0, 0.3):  # with one agent the team reward is the agent's correctness
        np.testing.assert_allclose(credit("reward_mixing", {"alpha": alpha}, arrays, mode, 0.8), identity,
                                   rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["turn", "return"])
def test_reward_mixing_endpoints(mode):
    arrays = batch(2, (4, 4, 3, 2))
    _, votes, gold, active = arrays
    np.testing.assert_array_equal(credit("reward_mixing", {"alpha": 1.0}, arrays, mode, 0.8),
                                  credit("identity", {}, arrays, mode, 0.8))
    team = np.where(active, np.asarray(team_reward(votes, gold, active))[:, :, None, :], 0.0)
    expected = team if mode == "turn" else discounted(team, active, 0.8)
    np.testing.assert_allclose(credit("reward_mixing", {"alpha": 0.0}, arrays, mode, 0.8), expected,
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("mask", ["full", "early_stop", "random"])
def test_one_agent_coma_is_correct_minus_the_slot_mean_and_equals_identity_by_slot(mask):
    arrays = batch(3, (5, 4, 1, 3), mask=mask)
    c, active = arrays[0], arrays[3]
    coma = credit("coma_advantage", {"n_rollouts_per_prompt": 4}, arrays)
    played = np.where(active, c, 0.0)
    slot_mean = played.sum(1, keepdims=True) / np.maximum(active.sum(1, keepdims=True), 1)
    np.testing.assert_allclose(coma, np.where(active, c - slot_mean, 0.0), rtol=0, atol=1e-6)
    assert_same_advantages(coma, credit("identity", {}, arrays), active, groupings=("agent_round",))


def round_bonus(active):
    """debate_length PBRS under turn credit: correct + (r - gamma * r_next) / R, with r_next the
    agent's next active round, and + r / R at its last active round (Phi = 0 after it)."""
    n_rounds = active.shape[-1]
    out = np.zeros(active.shape)
    for idx in np.ndindex(active.shape[:-1]):
        played = np.flatnonzero(active[idx])
        for k, r in enumerate(played):
            nxt = played[k + 1] if k + 1 < len(played) else None
            out[idx + (r,)] = (r - (GAMMA * nxt if nxt is not None else 0.0)) / n_rounds
    return out


@pytest.mark.parametrize("mask", ["full", "early_stop", "random"])
def test_debate_length_pbrs_turn_credit_is_correct_plus_a_round_bonus(mask):
    arrays = batch(4, (4, 4, 3, 3), mask=mask)
    c, active = arrays[0], arrays[3]
    pbrs = credit("potential_based", {"gamma": GAMMA, "potential_type": "debate_length"}, arrays)
    np.testing.assert_allclose(pbrs, np.where(active, c + round_bonus(active), 0.0), rtol=0, atol=1e-6)


def test_debate_length_pbrs_turn_credit_two_rounds_by_hand():
    active = np.ones((1, 1, 1, 2), bool)
    zeros = np.zeros(active.shape, np.float32)
    got = credit("potential_based", {"gamma": GAMMA, "potential_type": "debate_length"},
                 (zeros, zeros.astype(np.int32), np.array([0]), active))
    np.testing.assert_allclose(got[0, 0, 0], [-GAMMA / 2, 1 / 2], rtol=0, atol=1e-7)


def test_debate_length_pbrs_turn_credit_cancels_by_slot_only_when_every_debate_is_played_out():
    full = batch(5, (6, 4, 3, 2), mask="full")
    pbrs_cfg = ("potential_based", {"gamma": GAMMA, "potential_type": "debate_length"})
    assert_same_advantages(credit(*pbrs_cfg, full), credit("identity", {}, full), full[3],
                           groupings=("agent_round",))
    # by prompt the round bonus stays: with every answer correct identity has no signal, PBRS
    # ranks round-1 turns (+1/2) above round-0 turns (-gamma/2)
    right = (np.ones_like(full[0]),) + full[1:]
    np.testing.assert_allclose(advantages(credit("identity", {}, right), full[3], "rloo", "prompt"), 0, atol=1e-6)
    adv = advantages(credit(*pbrs_cfg, right), full[3], "rloo", "prompt")
    assert np.all(adv[..., 1] > 0) and np.all(adv[..., 0] < 0)
    # early stops: a debate's last round gets r/R instead of (r - gamma (r+1))/R, a stop bonus
    stopped = batch(5, (6, 4, 3, 2), mask="early_stop")
    assert (~stopped[3][..., 1]).any()
    adv = advantages(credit(*pbrs_cfg, stopped), stopped[3], "rloo", "agent_round")
    assert not np.allclose(adv, advantages(credit("identity", {}, stopped), stopped[3], "rloo", "agent_round"))


@pytest.mark.parametrize("mask", ["full", "early_stop", "padding"])
def test_debate_length_pbrs_return_credit_is_return_plus_r_over_R_and_identity_by_slot(mask):
    arrays = batch(6, (6, 4, 3, 3), mask=mask)
    c, active = arrays[0], arrays[3]
    pbrs = credit("potential_based", {"gamma": GAMMA, "potential_type": "debate_length"}, arrays, "return", GAMMA)
    rounds = np.arange(active.shape[-1]) / active.shape[-1]
    np.testing.assert_allclose(pbrs, np.where(active, discounted(c, active, GAMMA) + rounds, 0.0),
                               rtol=0, atol=1e-5)
    assert_same_advantages(pbrs, credit("identity", {}, arrays, "return", GAMMA), active,
                           groupings=("agent_round",))


def previous_round_agreement(arrays):
    """Phi(g, r) of the agreement potential on every active turn, computed independently of the
    reference: 0 in round 0; else the fraction of the agents active in round r - 1 that voted for
    its most common valid answer (0 when round r - 1 has no valid vote), one float32 division."""
    _, votes, _, active = arrays
    out = np.zeros(active.shape)
    for b, g, a, r in zip(*np.nonzero(active)):
        if r == 0:
            continue
        present = active[b, g, :, r - 1]
        valid = votes[b, g, :, r - 1][present & (votes[b, g, :, r - 1] >= 0)]
        if valid.size:
            out[b, g, a, r] = np.float32(np.bincount(valid).max()) / np.float32(present.sum())
    return out


@pytest.mark.parametrize("mask", ["full", "early_stop", "padding", "random"])
def test_agreement_potential_is_the_previous_rounds_agreement(mask):
    arrays = batch(11, (5, 4, 3, 3), mask=mask)
    np.testing.assert_array_equal(potential(arrays, "agreement"), previous_round_agreement(arrays))


@pytest.mark.parametrize("mask", ["full", "early_stop", "padding"])
def test_agreement_pbrs_return_credit_is_return_minus_previous_agreement(mask):
    arrays = batch(7, (5, 4, 3, 3), mask=mask)
    c, active = arrays[0], arrays[3]
    pbrs = credit("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}, arrays, "return", GAMMA)
    np.testing.assert_allclose(pbrs, discounted(c, active, GAMMA) - previous_round_agreement(arrays),
                               rtol=0, atol=1e-5)
    # round 0 acts in the empty state (Phi = 0): its credit is the plain discounted return
    np.testing.assert_allclose(pbrs[..., 0], discounted(c, active, GAMMA)[..., 0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("mask", ["full", "early_stop", "random"])
def test_agreement_pbrs_turn_credit(mask):
    arrays = batch(8, (5, 4, 3, 3), mask=mask)
    c, active = arrays[0], arrays[3]
    phi = previous_round_agreement(arrays)
    phi_next = np.zeros(phi.shape)
    for idx in np.ndindex(active.shape[:-1]):
        played = np.flatnonzero(active[idx])
        for r, nxt in zip(played[:-1], played[1:]):
            phi_next[idx + (r,)] = phi[idx + (nxt,)]
    pbrs = credit("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}, arrays)
    np.testing.assert_allclose(pbrs, np.where(active, c + GAMMA * phi_next - phi, 0.0), rtol=0, atol=1e-6)


def test_one_agent_agreement_pbrs_return_is_identity_by_slot_and_a_round_penalty_by_prompt():
    # one agent that always answers: Phi = 0 in round 0 and 1 after, so the credit is the return
    # in round 0 and the return - 1 after it
    arrays = batch(9, (5, 4, 1, 3), mask="early_stop", empty_votes=False)
    active = arrays[3]
    pbrs = credit("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}, arrays, "return", GAMMA)
    identity = credit("identity", {}, arrays, "return", GAMMA)
    later = np.arange(active.shape[-1]) >= 1
    np.testing.assert_allclose(pbrs, np.where(active, identity - later, 0.0), rtol=0, atol=1e-6)
    assert_same_advantages(pbrs, identity, active, groupings=("agent_round",))
    # by prompt the -1 of later rounds stays: with every answer correct identity's return still
    # ranks rounds (earlier rounds have longer returns), PBRS moves round 0 up by 1 against them
    right = (np.ones_like(arrays[0]),) + arrays[1:]
    gap_id = credit("identity", {}, right, "return", GAMMA)
    gap_pb = credit("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}, right, "return", GAMMA)
    np.testing.assert_allclose(gap_pb, np.where(active, gap_id - later, 0.0), rtol=0, atol=1e-6)
    adv_id = advantages(gap_id, active, "rloo", "prompt")
    adv_pb = advantages(gap_pb, active, "rloo", "prompt")
    assert not np.allclose(adv_id, adv_pb)


def test_agreement_potential_ignores_the_turns_own_vote():
    """Phi(g, r) is the agreement of round r - 1: joining the plurality in round r (correctness
    unchanged) leaves every round-r credit unchanged, and changes round r + 1's potential only."""
    gold = np.array([2])  # nobody is correct
    alone = np.array([[0, 0], [0, 0], [1, 1]], np.int32)[None, None]  # [1, 1, A=3, R=2]
    joined = np.zeros_like(alone)
    active = np.ones(alone.shape, bool)
    zeros = np.zeros(alone.shape, np.float32)
    cfg = ("potential_based", {"gamma": GAMMA, "potential_type": "agreement"})
    got = {name: credit(*cfg, (zeros, v, gold, active), "return", GAMMA)[0, 0] for name, v in
           (("alone", alone), ("joined", joined))}
    # round 0: Phi = 0 whatever was said, so all round-0 credits are the return of correctness, 0
    np.testing.assert_array_equal(got["alone"][:, 0], [0, 0, 0])
    np.testing.assert_array_equal(got["joined"][:, 0], [0, 0, 0])
    # round 1: -Phi(1) = minus round 0's agreement, 2/3 after (0, 0, 1), 1 after (0, 0, 0)
    np.testing.assert_allclose(got["alone"][:, 1], [-2 / 3] * 3, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["joined"][:, 1], [-1.0] * 3, rtol=0, atol=1e-6)
    # the shaping terms of each agent sum to -Phi(0) = 0 whatever the round-0 answers
    for v in (alone, joined):
        turn = credit(*cfg, (zeros, v, gold, active))[0, 0]
        np.testing.assert_allclose(turn[:, 0] + GAMMA * turn[:, 1], 0.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["turn", "return"])
def test_one_round_agreement_pbrs_is_identity(mode):
    arrays = batch(12, (4, 4, 3, 1), mask="padding")
    np.testing.assert_array_equal(
        credit("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}, arrays, mode, GAMMA),
        credit("identity", {}, arrays, mode, GAMMA))


@pytest.mark.parametrize("strategy, params", [
    ("identity", {}), ("difference_rewards", {}), ("coma_advantage", {"n_rollouts_per_prompt": 4}),
    ("potential_based", {"gamma": GAMMA, "potential_type": "agreement"}), ("reward_mixing", {"alpha": 0.5}),
])
def test_one_round_return_is_turn(strategy, params):
    arrays = batch(10, (4, 4, 3, 1))
    np.testing.assert_array_equal(credit(strategy, params, arrays, "return", 0.5), credit(strategy, params, arrays))
