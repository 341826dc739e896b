"""The five shaping strategies: exact agreement with the loop reference, DESIGN §4 invariants, compile count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import shaping_reference as ref
from shaping_reference import FMA_STRATEGIES, configs, mixed_batch
from jaxdebate.errors import ConfigError
from jaxdebate.shaping import (
    STRATEGIES,
    Param,
    ShapingConfig,
    list_strategies,
    register_strategy,
    shape_rewards,
    team_reward,
)
from jaxdebate.shaping.registry import in_unit_interval

BUILTINS = ["coma_advantage", "difference_rewards", "identity", "potential_based", "reward_mixing"]


def test_registry_lists_the_five_strategies():
    builtins = [name for name in list_strategies() if not name.startswith("test_")]  # this file adds one
    assert builtins == BUILTINS
    assert sorted(STRATEGIES) == list_strategies()


dims = st.tuples(
    st.integers(1, 6), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**32 - 1)
)


@settings(max_examples=8, deadline=None)
@given(dims)
@example((3, 4, 1, 3, 1))  # one agent
@example((3, 3, 3, 1, 2))  # one round
@example((2, 1, 3, 3, 3))  # one rollout per prompt
def test_strategies_match_reference_exactly_and_keep_invariants(d):
    n_groups, n_rollouts, n_agents, n_rounds, seed = d
    correct, votes, gold, active = mixed_batch(seed, n_groups, n_rollouts, n_agents, n_rounds)
    team = np.asarray(team_reward(votes, gold, active))
    for b in range(n_groups):
        np.testing.assert_array_equal(team[b], ref.team_group(votes[b], gold[b], active[b]))

    out = {}
    for name, params in configs(n_rollouts):
        shaped = np.asarray(shape_rewards(ShapingConfig(name, params), correct, votes, gold, active))
        expected = ref.shape_batch(name, params, correct, votes, gold, active)
        if name in FMA_STRATEGIES:  # a * b + c: the backend may fuse it into one FMA rounding
            np.testing.assert_allclose(shaped, expected, rtol=0, atol=2.0**-22, err_msg=f"{name} {params}")
        else:
            np.testing.assert_array_equal(shaped, expected, err_msg=f"{name} {params}")
        assert shaped.dtype == np.float32 and shaped.shape == correct.shape
        assert np.all(shaped[~active] == 0.0), f"{name}: inactive turns must be 0"
        out[name, params.get("potential_type")] = shaped

    # reward_mixing endpoints (alpha is traced: same executable as alpha=0.3 above).
    identity = out["identity", None]
    np.testing.assert_array_equal(shape_rewards(ShapingConfig("reward_mixing", {"alpha": 1.0}), correct, votes, gold, active), identity)
    team_turns = np.where(active, team[:, :, None, :], 0.0)
    np.testing.assert_array_equal(shape_rewards(ShapingConfig("reward_mixing", {"alpha": 0.0}), correct, votes, gold, active), team_turns)

    # PBRS: the discounted sum of shaping terms over an agent's active rounds is -Phi(first round).
    for kind in ("debate_length", "agreement"):
        gamma = 0.9 if kind == "debate_length" else 0.73
        terms = out["potential_based", kind] - np.where(active, correct, 0.0)
        for b, g, a in np.ndindex(n_groups, n_rollouts, n_agents):
            played = np.flatnonzero(active[b, g, a])
            if played.size == 0:
                continue
            total = sum(gamma**k * terms[b, g, a, r] for k, r in enumerate(played))
            phi0 = ref.round_potential(votes[b], active[b], g, played[0], kind, n_rounds)
            np.testing.assert_allclose(total, -phi0, atol=1e-5)

    # One agent: difference rewards == identity, coma == correct - mean over the rollouts that played
    # the round (for groups whose correctness is graded from their votes).
    graded = (votes == gold[:, None, None, None]) & (gold[:, None, None, None] >= 0)
    consistent = [b for b in range(n_groups) if np.all(correct[b][active[b]] == graded[b][active[b]])]
    assert 0 in consistent
    if n_agents == 1:
        np.testing.assert_array_equal(out["difference_rewards", None][consistent], identity[consistent])
        played = active[consistent, :, 0, :]  # [B', G, R]
        c = np.where(played, correct[consistent, :, 0, :], 0.0)
        mean_g = c.sum(1, keepdims=True) / np.maximum(played.sum(1, keepdims=True), 1)
        coma = out["coma_advantage", None][consistent, :, 0, :]
        np.testing.assert_allclose(coma, np.where(played, c - mean_g, 0.0), atol=1e-6)

    # An agent whose vote is the same in every rollout gets coma advantage 0.
    for agent in range(n_agents):
        fixed = votes.copy()
        fixed[:, :, agent, :] = votes[:, :1, agent, :]
        coma = np.asarray(shape_rewards(ShapingConfig("coma_advantage", {"n_rollouts_per_prompt": n_rollouts}), correct, fixed, gold, active))
        assert np.all(coma[:, :, agent, :] == 0.0)


def test_team_reward_ties_share_the_win_and_masks():
    rows = [  # agent a's votes in rounds 0..6 (one group, one rollout)
        [2, 1, 5, 7, 3, -1, 1],
        [1, 2, 5, 7, 3, -1, 2],
        [1, 2, 6, 7, 4, -1, 3],
        [9, 9, 6, 7, 4, -1, -1],
    ]
    votes = np.array(rows, np.int32)[None, None]  # [B=1, G=1, A=4, R=7]
    active = np.ones(votes.shape, bool)
    active[0, 0, 3, 0] = False  # agent 3's round-0 vote is ignored
    active[0, 0, :, 3] = False  # round 3 not played

    def team(gold):
        return np.asarray(team_reward(votes, np.array([gold]), active))[0, 0]

    assert team(1)[0] == 1.0 and team(2)[0] == 0.0 and team(9)[0] == 0.0  # 2,1,1 -> 1
    assert team(2)[1] == 1.0 and team(1)[1] == 0.0  # 1,2,2,9 -> 2
    assert team(5)[2] == 0.5 and team(6)[2] == 0.5  # 5,5,6,6: a two-way tie shares the win
    assert team(7)[3] == 0.0  # nobody played
    assert team(3)[4] == 0.5 and team(4)[4] == 0.5 and team(9)[4] == 0.0
    assert team(1)[6] == np.float32(1) / np.float32(3) == team(3)[6]  # 1,2,3 and an empty vote
    assert np.all(team(-1) == 0.0)  # gold -1 never wins; round 5 has only empty votes


def test_a_tie_favours_no_agent_order():
    # votes 3,4,4,3: a tie between 3 and 4, whatever order the agents come in
    votes = np.array([3, 4, 4, 3])[None, None, :, None]
    active = np.ones(votes.shape, bool)
    for perm in ([0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1]):
        for gold in (3, 4):
            assert float(team_reward(votes[:, :, perm], np.array([gold]), active)[0, 0, 0]) == 0.5
    active[0, 0, 0, 0] = False  # without agent 0: 4 has 2 votes, 3 has 1 -> 4
    assert float(team_reward(votes, np.array([4]), active)[0, 0, 0]) == 1.0
    assert float(team_reward(votes, np.array([3]), active)[0, 0, 0]) == 0.0


def test_hand_computed_group():
    """G=2, A=2, R=2, gold=1; rollout 1 stops after round 0."""
    votes = np.array([[[[1, 1], [0, 1]], [[0, 9], [1, 9]]]], np.int32)  # [1, G, A, R]
    active = np.array([[[[1, 1], [1, 1]], [[1, 0], [1, 0]]]], bool)
    gold = np.array([1], np.int32)
    correct = np.array([[[[1, 1], [0, 1]], [[0, 0], [1, 0]]]], np.float32)
    # team: g0 r0 votes (1,0) tie => 1/2; g0 r1 (1,1) => 1; g1 r0 (0,1) tie => 1/2.
    np.testing.assert_array_equal(team_reward(votes, gold, active)[0], [[0.5, 1], [0.5, 0]])
    diff = np.asarray(shape_rewards(ShapingConfig("difference_rewards", {}), correct, votes, gold, active))[0]
    # g0 r0: without a0 -> 0 wins => 1/2-0; without a1 -> 1 => 1/2-1. g0 r1: 1-1=0 both.
    # g1 r0: without a0 -> 1 => 1/2-1; without a1 -> 0 => 1/2-0. The two agents are treated alike.
    np.testing.assert_array_equal(diff, [[[0.5, 0], [-0.5, 0]], [[-0.5, 0], [0.5, 0]]])
    coma = np.asarray(shape_rewards(ShapingConfig("coma_advantage", {"n_rollouts_per_prompt": 2}), correct, votes, gold, active))[0]
    # g0 r0, a0: cf votes (1,0)->1/2, (0,0)->0: b=1/4 => 1/4. a1: (1,0)->1/2, (1,1)->1: b=3/4 => -1/4.
    # g1 r0, a0: (1,1)->1, (0,1)->1/2 => 1/2-3/4. a1: (0,0)->0, (0,1)->1/2 => 1/2-1/4.
    # round 1 only played by g0: b = team => 0.
    np.testing.assert_array_equal(coma, [[[0.25, 0], [-0.25, 0]], [[-0.25, 0], [0.25, 0]]])
    pbrs = np.asarray(shape_rewards(ShapingConfig("potential_based", {"gamma": 0.5, "potential_type": "debate_length"}), correct, votes, gold, active))[0]
    # Phi(r0)=0, Phi(r1)=-1/2. g0: r0 = c + 0.5*(-0.5) - 0 = c - 0.25; r1 = c + 0 + 0.5. g1: r0 = c (no next round).
    np.testing.assert_array_equal(pbrs, [[[0.75, 1.5], [-0.25, 1.5]], [[0, 0], [1, 0]]])
    agree = np.asarray(shape_rewards(ShapingConfig("potential_based", {"gamma": 0.5, "potential_type": "agreement"}), correct, votes, gold, active))[0]
    # Phi(r) is round r-1's agreement: Phi(r0) = 0; g0: Phi(r1) = 1/2 (round 0 votes 1, 0: a tie).
    # g0: r0 = c + 0.5 * 0.5 - 0 = c + 0.25; r1 = c + 0 - 0.5. g1 (stopped): r0 = c + 0 - 0 = c.
    np.testing.assert_array_equal(agree, [[[1.25, 0.5], [0.25, 0.5]], [[0, 0], [1, 0]]])


def _count_compiles(fn):
    """Run fn() and return how many XLA backend compilations of _shape_batch it triggered."""
    seen = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration" and "_shape_batch" in str(kwargs.get("fun_name", "")):
            seen.append(kwargs["fun_name"])

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(seen)


def test_repeated_calls_compile_once_and_float_params_are_traced():
    c, v, g, a = mixed_batch(7, 5, 3, 2, 5)  # a shape no other test uses

    def calls(strategy, params_list, batch=(c, v, g, a)):
        def run():
            for params in params_list:
                shape_rewards(ShapingConfig(strategy, params), *batch).block_until_ready()
        return run

    assert _count_compiles(calls("coma_advantage", [{"n_rollouts_per_prompt": 3}] * 4)) == 1
    gammas = [{"gamma": x, "potential_type": "agreement"} for x in (0.9, 0.5, 1.0, 0.99)]
    assert _count_compiles(calls("potential_based", gammas)) == 1
    assert _count_compiles(calls("reward_mixing", [{"alpha": x} for x in (0.0, 0.25, 1.0)])) == 1
    # new data of the same shape: no compile; a new batch size: exactly one more
    c2, v2, g2, a2 = mixed_batch(8, 5, 3, 2, 5)
    assert _count_compiles(calls("reward_mixing", [{"alpha": 0.5}], (c2, v2, g2, a2))) == 0
    c3, v3, g3, a3 = mixed_batch(9, 6, 3, 2, 5)
    assert _count_compiles(calls("reward_mixing", [{"alpha": 0.5}] * 3, (c3, v3, g3, a3))) == 1
    # a different static param is a different program
    assert _count_compiles(calls("potential_based", [{"gamma": 0.9, "potential_type": "debate_length"}] * 2)) == 1

    # the credit mode is static (one program each), the discount traced (no recompile when swept)
    def returns(discounts):
        def run():
            for d in discounts:
                cfg = ShapingConfig("reward_mixing", {"alpha": 0.5}, credit="return", discount=d)
                shape_rewards(cfg, c, v, g, a).block_until_ready()
        return run

    assert _count_compiles(returns([1.0, 0.9, 0.5])) == 1
    assert _count_compiles(returns([0.7])) == 0


TRACES: list[int] = []


def _scaled_correct(group, params):
    """A sixth strategy (counts its own traces)."""
    TRACES.append(1)
    return params["scale"] * group.correct


@pytest.fixture
def sixth_strategy():
    """Registered by one decorator call for this test only: the registry is process-wide, and a
    strategy left behind would be a strategy every config family lacks (the sweep refuses that)."""
    from jaxdebate.shaping import registry

    register_strategy("test_scaled_correct", params=(Param("scale", float, in_unit_interval),))(_scaled_correct)
    yield
    del registry._REGISTRY["test_scaled_correct"]


def test_a_sixth_strategy_is_one_decorated_function(sixth_strategy):
    c, v, g, a = mixed_batch(3, 2, 2, 3, 2)
    before = len(TRACES)
    for scale in (0.5, 0.25, 1.0):
        out = shape_rewards(ShapingConfig("test_scaled_correct", {"scale": scale}), c, v, g, a)
        np.testing.assert_array_equal(out, np.where(a, np.float32(scale) * c, 0.0))
    assert len(TRACES) - before == 1  # traced once: vmapped, jitted, scale traced
    assert "test_scaled_correct" in list_strategies()
    with pytest.raises(ConfigError, match=r"shaping\.params\.scale must be in \[0, 1\]"):
        ShapingConfig("test_scaled_correct", {"scale": 2.0})  # a config error when the section is built


def test_shape_rewards_is_usable_inside_a_callers_jit():
    c, v, g, a = mixed_batch(5, 2, 2, 2, 2)

    @jax.jit
    def step(c, v, g, a):
        return jnp.sum(shape_rewards(ShapingConfig("difference_rewards", {}), c, v, g, a))

    expected = ref.shape_batch("difference_rewards", {}, c, v, g, a).sum()
    assert float(step(c, v, g, a)) == pytest.approx(float(expected))
