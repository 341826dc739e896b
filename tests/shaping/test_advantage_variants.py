"""Dr. GRPO advantages and per-agent normalisation (Dr. MAS) against a plain loop over the groups, for
every estimator and grouping; the zero-signal rule and the filter at per-agent groups; the per-agent
advantage metrics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxdebate.errors import ConfigError
from jaxdebate.shaping import ESTIMATORS, GROUPINGS, ZERO_SIGNAL_TOL, advantage_metrics, compute_advantages
from jaxdebate.shaping import sample_filter


def _group_key(grouping, per_agent, b, a, r):
    if grouping == "agent_round":
        return (b, a, r)
    return (b, a) if per_agent else (b,)


def reference_advantages(shaped, active, estimator, grouping, per_agent, eps=1e-6):
    """A loop over the groups: collect each group's active members, then apply the estimator."""
    groups: dict[tuple, list] = {}
    for b, g, a, r in itertools.product(*map(range, shaped.shape)):
        if active[b, g, a, r]:
            groups.setdefault(_group_key(grouping, per_agent, b, a, r), []).append((b, g, a, r))
    out = np.zeros(shaped.shape)
    for members in groups.values():
        x = np.array([float(shaped[m]) for m in members])
        hi, lo = x.max(), x.min()
        if hi - lo <= ZERO_SIGNAL_TOL * max(1.0, abs(hi), abs(lo)):
            continue  # zero signal: exactly 0
        for i, m in enumerate(members):
            if estimator == "grpo":
                out[m] = (x[i] - x.mean()) / (x.std() + eps)
            elif estimator == "dr_grpo":
                out[m] = x[i] - x.mean()
            else:
                out[m] = x[i] - np.delete(x, i).mean()
    return out


def _batch(seed, shape=(3, 4, 3, 2)):
    rng = np.random.default_rng(seed)
    shaped = rng.choice([0.0, 0.5, 1.0, 2.0], size=shape).astype(np.float32)  # ties and flat groups
    shaped[0, :, 1] = 0.5  # agent 1 of prompt 0 is flat: a zero-signal group only per agent
    active = rng.random(shape) < 0.8
    active[..., 0] = True  # round 0 is always played
    return shaped, active


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("per_agent", [False, True])
def test_advantages_match_the_loop_reference(estimator, grouping, per_agent):
    for seed in range(4):
        shaped, active = _batch(seed)
        adv = np.asarray(compute_advantages(shaped, active, estimator=estimator, grouping=grouping,
                                            per_agent=per_agent))
        np.testing.assert_allclose(adv, reference_advantages(shaped, active, estimator, grouping, per_agent),
                                   rtol=1e-5, atol=1e-5)
        assert np.all(adv[~active] == 0.0)
        if per_agent and grouping == "prompt":
            assert np.all(adv[0, :, 1] == 0.0)  # the flat agent's group


def test_dr_grpo_by_hand():
    # one prompt, G=4, A=1, R=1: credits 1, 0, 0, 1 with rollout 3 inactive: mean 1/3, no std division
    shaped = np.array([1.0, 0.0, 0.0, 1.0], np.float32).reshape(1, 4, 1, 1)
    active = np.array([True, True, True, False]).reshape(1, 4, 1, 1)
    adv = np.asarray(compute_advantages(shaped, active, estimator="dr_grpo", grouping="prompt")).ravel()
    np.testing.assert_allclose(adv, [2 / 3, -1 / 3, -1 / 3, 0.0], rtol=1e-6)
    # the scale of the credits is kept (grpo would make both the same)
    big = np.asarray(compute_advantages(10 * shaped, active, estimator="dr_grpo", grouping="prompt")).ravel()
    np.testing.assert_allclose(big, 10 * adv, rtol=1e-6)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("per_agent", [False, True])
def test_equal_credits_give_exactly_zero(estimator, per_agent):
    active = np.ones((1, 4, 2, 1), bool)
    # one float32 rounding apart (credit equal in exact arithmetic can differ by an ulp)
    up = np.nextafter(np.float32(0.7), np.float32(1.0))
    almost = np.array([0.7, up, up, 0.7] * 2, np.float32).reshape(1, 4, 2, 1)
    assert len(set(almost.ravel().tolist())) == 2
    for shaped in (np.full((1, 4, 2, 1), 0.7, np.float32), almost):
        for grouping in GROUPINGS:
            adv = compute_advantages(shaped, active, estimator=estimator, grouping=grouping, per_agent=per_agent)
            np.testing.assert_array_equal(adv, 0.0)


def test_per_agent_norm_by_hand():
    # one prompt, G=2, A=2, R=1: agent 0's credits 1/0, agent 1's 10/0
    shaped = np.array([[[[1.0], [10.0]], [[0.0], [0.0]]]], np.float32)
    active = np.ones(shaped.shape, bool)
    together = np.asarray(compute_advantages(shaped, active, estimator="grpo", grouping="prompt"))
    alone = np.asarray(compute_advantages(shaped, active, estimator="grpo", grouping="prompt", per_agent=True))
    x = shaped.ravel()[[0, 1, 2, 3]]
    np.testing.assert_allclose(together.ravel(), (x - x.mean()) / (x.std() + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(alone[0, :, 0, 0], [1.0, -1.0], rtol=1e-5)  # each agent on its own scale
    np.testing.assert_allclose(alone[0, :, 1, 0], [1.0, -1.0], rtol=1e-5)
    dr = np.asarray(compute_advantages(shaped, active, estimator="dr_grpo", grouping="prompt", per_agent=True))
    np.testing.assert_allclose(dr[0, :, :, 0], [[0.5, 5.0], [-0.5, -5.0]])
    # agent_round groups hold one agent already: per_agent changes nothing
    for estimator in ESTIMATORS:
        shaped_r, active_r = _batch(7)
        a, b = (np.asarray(compute_advantages(shaped_r, active_r, estimator=estimator, grouping="agent_round",
                                              per_agent=p)) for p in (False, True))
        np.testing.assert_array_equal(a, b)


def test_the_filter_drops_what_per_agent_groups_zero():
    shaped, active = _batch(3)
    truncated = np.zeros(active.shape, bool)
    for per_agent in (False, True):
        keep, stats = sample_filter(shaped, active, truncated, grouping="prompt", per_agent=per_agent)
        keep = np.asarray(keep)
        adv = reference_advantages(shaped, active, "dr_grpo", "prompt", per_agent)
        flat = np.zeros(active.shape, bool)  # the turns of each agent's flat group
        for b, a in itertools.product(range(shaped.shape[0]), range(shaped.shape[2])):
            members = shaped[b, :, a][active[b, :, a]]
            if members.size and np.ptp(members) == 0:
                flat[b, :, a] = active[b, :, a]
        if per_agent:
            np.testing.assert_array_equal(keep, active & ~flat)
            assert not keep[0, :, 1].any() and np.all(adv[~keep] == 0)
            assert float(stats["n_groups"]) == shaped.shape[0] * shaped.shape[2]
        else:
            assert keep[0, :, 1].any()  # the prompt's group has signal: agent 1's turns stay
            assert float(stats["n_groups"]) == shaped.shape[0]


def test_unknown_estimator_names_dr_grpo():
    shaped, active = _batch(0)
    with pytest.raises(ConfigError, match="one of grpo, rloo, dr_grpo, got 'drgrpo'"):
        compute_advantages(shaped, active, estimator="drgrpo", grouping="prompt")


def test_advantage_metrics_per_agent():
    shaped, active = _batch(5)
    adv = np.asarray(compute_advantages(shaped, active, estimator="grpo", grouping="prompt"))
    adv_with_noise = np.where(active, adv, 99.0)  # what inactive turns hold must not count
    m = advantage_metrics(adv_with_noise, active)
    assert len(m) == 2 * shaped.shape[2]
    for a in range(shaped.shape[2]):
        mine = adv[:, :, a][active[:, :, a]]
        assert float(m[f"advantage_abs_mean/agent_{a}"]) == pytest.approx(np.abs(mine).mean(), rel=1e-5)
        assert float(m[f"advantage_std/agent_{a}"]) == pytest.approx(mine.std(), rel=1e-4, abs=1e-6)
    none = advantage_metrics(np.zeros((1, 2, 2, 1), np.float32), np.zeros((1, 2, 2, 1), bool))
    assert all(float(v) == 0.0 for v in none.values())
