"""Credit modes (shaping.credit / shaping.discount): exact agreement with the loop reference, the
reference against the textbook sum, and PBRS telescoping on returns (DESIGN §4, "Credit")."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import shaping_reference as ref
from shaping_reference import FMA_STRATEGIES, configs
from jaxdebate.shaping import ShapingConfig, shape_rewards


def textbook_return(shaped, active, discount):
    """credit[.., a, r] = sum over active t >= r of discount^(t - r) * shaped[.., a, t], in float64."""
    out = np.zeros(shaped.shape)
    n_rounds = shaped.shape[-1]
    for idx in np.ndindex(shaped.shape[:-1]):
        for r in range(n_rounds):
            if active[idx + (r,)]:
                out[idx + (r,)] = sum(
                    discount ** (t - r) * float(shaped[idx + (t,)]) for t in range(r, n_rounds) if active[idx + (t,)]
                )
    return out


dims = st.tuples(
    st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**32 - 1)
)


@settings(max_examples=6, deadline=None)
@given(dims, st.sampled_from([1.0, 0.9, 0.37]))
@example((3, 4, 3, 3, 11), 0.9)
@example((2, 3, 1, 4, 12), 1.0)  # one agent, four rounds
def test_return_credit_matches_reference_exactly(d, discount):
    n_groups, n_rollouts, n_agents, n_rounds, seed = d
    correct, votes, gold, active = ref.mixed_batch(seed, n_groups, n_rollouts, n_agents, n_rounds)
    for name, params in configs(n_rollouts):
        turn = np.asarray(shape_rewards(ShapingConfig(name, params), correct, votes, gold, active))
        cfg = ShapingConfig(name, params, credit="return", discount=discount)
        got = np.asarray(shape_rewards(cfg, correct, votes, gold, active))
        expected = ref.shape_batch(name, params, correct, votes, gold, active, "return", discount)
        if name in FMA_STRATEGIES:  # one fused rounding, carried through at most R additions of |x| <= 2R
            np.testing.assert_allclose(got, expected, rtol=0, atol=n_rounds * 2.0**-20, err_msg=f"{name} {params}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} {params}")
        assert got.dtype == np.float32 and np.all(got[~active] == 0.0)
        # the credit is the textbook discounted sum of this strategy's own turn rewards
        np.testing.assert_allclose(got, textbook_return(turn, active, discount), rtol=0, atol=1e-5)
        # the last active round of an agent is credited with its own shaped reward
        last = active & (np.cumsum(active[..., ::-1], axis=-1)[..., ::-1] == 1)
        np.testing.assert_array_equal(got[last], turn[last])


def test_turn_credit_ignores_the_discount_and_is_the_shaped_reward():
    correct, votes, gold, active = ref.mixed_batch(21, 4, 3, 3, 2)
    for name, params in configs(3):
        default = np.asarray(shape_rewards(ShapingConfig(name, params), correct, votes, gold, active))
        other = np.asarray(shape_rewards(ShapingConfig(name, params, discount=0.5), correct, votes, gold, active))
        np.testing.assert_array_equal(default, other)


def test_return_credit_by_hand():
    # one group, G=1, A=2, R=3, identity: agent 0 plays all rounds, agent 1 stops after round 1
    correct = np.array([[[[1, 0, 1], [0, 1, 1]]]], np.float32)
    active = np.array([[[[1, 1, 1], [1, 1, 0]]]], bool)
    votes = np.zeros(correct.shape, np.int32)
    cfg = ShapingConfig("identity", {}, credit="return", discount=0.5)
    got = np.asarray(shape_rewards(cfg, correct, votes, np.array([0]), active))[0, 0]
    np.testing.assert_array_equal(got, [[1 + 0 + 0.25, 0 + 0.5, 1], [0 + 0.5, 1, 0]])


def state_potential(votes, active, kind, n_rounds):
    """Phi(g, r) [B, G, A, R] on active turns, written independently of the reference: a function
    of what was said before round r. debate_length -r/R; agreement 0 in round 0, else the share of
    the agents active in round r - 1 that gave its most common valid answer (0 without one)."""
    out = np.zeros(active.shape)
    for b, g, a, r in zip(*np.nonzero(active)):
        if kind == "debate_length":
            out[b, g, a, r] = -r / n_rounds
        elif r > 0:
            present = active[b, g, :, r - 1]
            said = votes[b, g, :, r - 1][present & (votes[b, g, :, r - 1] >= 0)]
            out[b, g, a, r] = np.bincount(said).max() / present.sum() if said.size else 0.0
    return out


@settings(max_examples=6, deadline=None)
@given(dims, st.sampled_from(["full", "early_stop", "padding"]), st.sampled_from([1.0, 0.9, 0.5]))
@example((3, 4, 3, 3, 5), "early_stop", 0.9)
def test_pbrs_return_with_discount_gamma_telescopes(d, mask, gamma):
    """credit[r] = sum_{t >= r} gamma^(t-r) correct_t - Phi(r) for an agent whose rounds are a prefix,
    with Phi(r) a function of the rounds before r only (an action-independent baseline): resampling
    the votes of rounds >= r, correctness held, leaves every credit of rounds <= r unchanged."""
    n_groups, n_rollouts, n_agents, n_rounds, seed = d
    rng = np.random.default_rng(seed)
    correct, votes, gold, active = ref.random_batch(rng, n_groups, n_rollouts, n_agents, n_rounds, mask=mask,
                                                    consistent=bool(seed % 2))
    for kind in ("debate_length", "agreement"):
        cfg = ShapingConfig("potential_based", {"gamma": gamma, "potential_type": kind}, credit="return",
                            discount=gamma)
        got = np.asarray(shape_rewards(cfg, correct, votes, gold, active))
        expected = textbook_return(correct, active, gamma) - state_potential(votes, active, kind, n_rounds)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=kind)
        for r in range(n_rounds):
            resampled = votes.copy()
            resampled[..., r:] = rng.integers(-1, 3, resampled[..., r:].shape)
            moved = np.asarray(shape_rewards(cfg, correct, resampled, gold, active))
            np.testing.assert_allclose(moved[..., : r + 1], got[..., : r + 1], rtol=0, atol=1e-5,
                                       err_msg=f"{kind}: round {r}'s credit depends on its own votes")
