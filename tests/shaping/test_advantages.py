"""Advantage estimators, sample filters and reward metrics over shaped rewards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shaping_reference as ref
from jaxdebate.errors import ConfigError
from jaxdebate.shaping import (
    ZERO_SIGNAL_TOL,
    ShapingConfig,
    compute_advantages,
    reward_metrics,
    sample_filter,
    shape_rewards,
    team_reward,
)


def _shaped_batch(seed, shape=(3, 4, 3, 2)):
    rng = np.random.default_rng(seed)
    correct, votes, gold, active = ref.random_batch(rng, *shape, mask=ref.MASK_KINDS[seed % 4])
    cfg = ShapingConfig("potential_based", {"gamma": 0.9, "potential_type": "agreement"})
    shaped = np.asarray(shape_rewards(cfg, correct, votes, gold, active))
    return shaped, active


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["grpo", "rloo"]), st.sampled_from(["prompt", "agent_round"]))
def test_advantages_match_loop_reference(seed, estimator, grouping):
    shaped, active = _shaped_batch(seed)
    adv = np.asarray(compute_advantages(shaped, active, estimator=estimator, grouping=grouping))
    expected = ref.advantages(shaped, active, estimator, grouping)
    np.testing.assert_allclose(adv, expected, rtol=1e-4, atol=1e-4)
    assert np.all(adv[~active] == 0.0)


def test_grpo_and_rloo_by_hand():
    # one prompt, G=4, A=1, R=1: rewards 1, 0, 0, 1 with rollout 3 inactive
    shaped = np.array([1.0, 0.0, 0.0, 1.0], np.float32).reshape(1, 4, 1, 1)
    active = np.array([True, True, True, False]).reshape(1, 4, 1, 1)
    grpo = np.asarray(compute_advantages(shaped, active, estimator="grpo", grouping="prompt")).ravel()
    mean, std = 1 / 3, np.sqrt(2 / 9)  # population std of (1, 0, 0)
    np.testing.assert_allclose(grpo, [(1 - mean) / (std + 1e-6), -mean / (std + 1e-6), -mean / (std + 1e-6), 0], rtol=1e-6)
    rloo = np.asarray(compute_advantages(shaped, active, estimator="rloo", grouping="prompt")).ravel()
    np.testing.assert_allclose(rloo, [1.0, -0.5, -0.5, 0.0], rtol=1e-6)
    # a singleton group and a constant group carry no advantage
    lone = np.array([True, False, False, False]).reshape(1, 4, 1, 1)
    for estimator in ("grpo", "rloo"):
        assert np.all(np.asarray(compute_advantages(shaped, lone, estimator=estimator, grouping="prompt")) == 0)
        const = np.full((1, 4, 1, 1), 0.7, np.float32)
        np.testing.assert_array_equal(compute_advantages(const, active, estimator=estimator, grouping="prompt"), 0)


def test_groupings_differ_where_rounds_differ():
    # G=2, A=1, R=2: round 1 is worth more in both rollouts. By prompt, round 1 beats round 0;
    # by (agent, round) slot, each round is compared only across rollouts.
    shaped = np.array([[[[0.0, 1.0]], [[0.5, 1.5]]]], np.float32)
    active = np.ones(shaped.shape, bool)
    prompt = np.asarray(compute_advantages(shaped, active, estimator="rloo", grouping="prompt"))
    slot = np.asarray(compute_advantages(shaped, active, estimator="rloo", grouping="agent_round"))
    np.testing.assert_allclose(slot[0, :, 0, 0], [-0.5, 0.5])
    np.testing.assert_allclose(slot[0, :, 0, 1], [-0.5, 0.5])
    assert prompt[0, 0, 0, 1] > 0 > prompt[0, 0, 0, 0]


def test_unknown_estimator_or_grouping_is_a_config_error():
    shaped, active = _shaped_batch(0)
    with pytest.raises(ConfigError, match="estimator must be one of grpo, rloo, dr_grpo, got 'ppo'"):
        compute_advantages(shaped, active, estimator="ppo", grouping="prompt")
    with pytest.raises(ConfigError, match="grouping must be one of prompt, agent_round, got 'agent'"):
        compute_advantages(shaped, active, estimator="grpo", grouping="agent")


def test_sample_filter_counts_zero_signal_groups_and_truncation():
    # B=3 prompts, G=2, A=1, R=1. Prompt 0: rewards differ; 1: identical; 2: only one active turn.
    shaped = np.array([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0]], np.float32).reshape(3, 2, 1, 1)
    active = np.array([[1, 1], [1, 1], [1, 0]], bool).reshape(3, 2, 1, 1)
    truncated = np.array([[0, 1], [0, 0], [0, 1]], bool).reshape(3, 2, 1, 1)
    keep, stats = sample_filter(shaped, active, truncated, grouping="prompt")
    np.testing.assert_array_equal(np.asarray(keep).reshape(3, 2), [[1, 0], [0, 0], [0, 0]])
    assert float(stats["zero_advantage_fraction"]) == pytest.approx(2 / 3)
    assert float(stats["truncated_fraction"]) == pytest.approx(1 / 5)  # the inactive truncated turn is ignored
    assert float(stats["kept_fraction"]) == pytest.approx(1 / 5)
    keep, _ = sample_filter(shaped, active, truncated, grouping="prompt", drop_zero_signal=False)
    np.testing.assert_array_equal(np.asarray(keep).reshape(3, 2), [[1, 0], [1, 1], [1, 0]])
    keep, stats2 = sample_filter(shaped, active, truncated, grouping="prompt", drop_zero_signal=False, drop_truncated=False)
    np.testing.assert_array_equal(keep, active)
    assert float(stats2["zero_advantage_fraction"]) == float(stats["zero_advantage_fraction"])


def test_zero_signal_groups_are_exactly_those_with_all_zero_advantages():
    shaped, active = _shaped_batch(3, shape=(6, 4, 2, 2))
    shaped = np.round(shaped)  # integer rewards: ties are common and rloo is exact
    truncated = np.zeros(shaped.shape, bool)
    for grouping, axes in (("prompt", (1, 2, 3)), ("agent_round", (1,))):
        keep, stats = sample_filter(shaped, active, truncated, grouping=grouping)
        adv = np.asarray(compute_advantages(shaped, active, estimator="rloo", grouping=grouping))
        has_member = active.any(axis=axes, keepdims=True)
        silent = has_member & np.all((adv == 0) | ~active, axis=axes, keepdims=True)
        np.testing.assert_array_equal(np.asarray(keep), active & ~silent)
        assert 0 < silent.sum() < has_member.sum()
        assert float(stats["zero_advantage_fraction"]) == pytest.approx(silent.sum() / has_member.sum())


def _near_constant_group(delta):
    """B=1 prompt, G=4, A=1, R=2, all active: credits 0.7 except one turn 0.7 + delta (float32)."""
    shaped = np.full((1, 4, 1, 2), 0.7, np.float32)
    shaped[0, 2, 0, 1] = np.float32(0.7) + np.float32(delta)
    return shaped, np.ones(shaped.shape, bool)


def test_rounding_noise_is_zero_signal_and_gets_exactly_zero_advantage():
    """Credits that differ by 1e-7 (a few float32 roundings of a constant) carry no signal: the
    group is filtered and both estimators give exactly 0 under both groupings."""
    assert ref.ZERO_SIGNAL_TOL == ZERO_SIGNAL_TOL  # the reference uses the one tolerance
    shaped, active = _near_constant_group(1e-7)
    spread = float(shaped.max() - shaped.min())
    assert 5e-8 < spread < 2e-7  # really different in float32
    x = shaped.astype(np.float64).ravel()
    naive = (x - x.mean()) / (x.std() + 1e-6)  # what grpo gave before: rounding noise as signal
    assert np.abs(naive).max() > 0.01
    truncated = np.zeros(shaped.shape, bool)
    for grouping in ("prompt", "agent_round"):
        keep, stats = sample_filter(shaped, active, truncated, grouping=grouping)
        assert not np.any(np.asarray(keep)), grouping
        assert float(stats["zero_advantage_fraction"]) == 1.0
        assert float(stats["kept_fraction"]) == 0.0
        for estimator in ("grpo", "rloo"):
            adv = np.asarray(compute_advantages(shaped, active, estimator=estimator, grouping=grouping))
            np.testing.assert_array_equal(adv, 0.0, err_msg=f"{estimator}/{grouping}")
            np.testing.assert_array_equal(ref.advantages(shaped, active, estimator, grouping), 0.0)


def test_a_real_difference_of_1e_3_is_signal():
    shaped, active = _near_constant_group(1e-3)
    truncated = np.zeros(shaped.shape, bool)
    odd_slot = np.zeros(shaped.shape, bool)
    odd_slot[0, :, 0, 1] = True  # agent_round: only the slot holding the 1e-3 has signal
    for grouping, signal in (("prompt", active), ("agent_round", odd_slot)):
        keep, stats = sample_filter(shaped, active, truncated, grouping=grouping)
        np.testing.assert_array_equal(np.asarray(keep), signal, err_msg=grouping)
        for estimator in ("grpo", "rloo"):
            adv = np.asarray(compute_advantages(shaped, active, estimator=estimator, grouping=grouping))
            assert adv[0, 2, 0, 1] > 0, f"{estimator}/{grouping}"
            assert np.all(adv[signal] != 0.0) and np.all(adv[~signal] == 0.0), f"{estimator}/{grouping}"
            np.testing.assert_allclose(adv, ref.advantages(shaped, active, estimator, grouping),
                                       rtol=1e-3, atol=1e-6)
    # grpo normalises a 1e-3 spread to full-size advantages: one turn of 8 above the rest is
    # sqrt(7) std above the mean, the others 1/sqrt(7) below
    grpo = np.asarray(compute_advantages(shaped, active, estimator="grpo", grouping="prompt"))
    expected = np.full(shaped.shape, -1 / np.sqrt(7.0))
    expected[0, 2, 0, 1] = np.sqrt(7.0)
    np.testing.assert_allclose(grpo, expected, rtol=1e-2)


def test_reward_metrics_by_hand():
    # B=1, G=2, A=2, R=2; rollout 1 stopped after round 0.
    correct = np.array([[[[1, 0], [0, 1]], [[1, 9], [1, 9]]]], np.float32)
    shaped = correct * 2
    active = np.array([[[[1, 1], [1, 1]], [[1, 0], [1, 0]]]], bool)
    votes = np.array([[[[1, 0], [0, 1]], [[1, 0], [1, 0]]]], np.int32)
    team = team_reward(votes, np.array([1]), active)  # g0: r0 and r1 ties share the win (1/2); g1: r0 -> 1
    m = {k: float(v) for k, v in reward_metrics(correct, shaped, team, active).items()}
    assert m["reward/raw/mean"] == pytest.approx(4 / 6)
    assert m["reward/shaped/mean"] == pytest.approx(8 / 6)
    assert m["reward/raw/agent_0"] == pytest.approx(2 / 3) and m["reward/raw/agent_1"] == pytest.approx(2 / 3)
    assert m["reward/raw/round_0"] == pytest.approx(3 / 4) and m["reward/raw/round_1"] == pytest.approx(1 / 2)
    assert m["reward/shaped/round_1"] == pytest.approx(1.0)
    assert m["accuracy/team"] == pytest.approx(3 / 4)  # g0's last round (r1) a tie (1/2), g1's (r0) right
    assert m["accuracy/team/round_0"] == pytest.approx(3 / 4) and m["accuracy/team/round_1"] == pytest.approx(1 / 2)
    expected_keys = {f"reward/{k}/{s}" for k in ("raw", "shaped") for s in ("mean", "agent_0", "agent_1", "round_0", "round_1")}
    assert set(m) == expected_keys | {"accuracy/team", "accuracy/team/round_0", "accuracy/team/round_1"}
    empty = reward_metrics(correct, shaped, team, np.zeros_like(active))
    assert all(float(v) == 0.0 for v in empty.values())
