"""Agents are exchangeable: permuting them permutes every strategy's credit exactly, and on random
exchangeable groups every agent gets the same mean |credit| (ties share the team's win)."""

from __future__ import annotations

import numpy as np
import pytest

import shaping_reference as ref
from shaping_reference import configs
from jaxdebate.shaping import ShapingConfig, shape_rewards


@pytest.mark.parametrize("seed, n_agents", [(0, 2), (1, 3), (2, 4)])
def test_permuting_agents_permutes_the_credit_exactly(seed, n_agents):
    correct, votes, gold, active = ref.mixed_batch(seed, 6, 4, n_agents, 3)
    rng = np.random.default_rng(seed)
    perms = [np.arange(n_agents)[::-1]] + [rng.permutation(n_agents) for _ in range(2)]
    for name, params in configs(4):
        for credit in ("turn", "return"):
            cfg = ShapingConfig(name, params, credit=credit, discount=0.8)
            base = np.asarray(shape_rewards(cfg, correct, votes, gold, active))
            for perm in perms:
                moved = [x[:, :, perm] for x in (correct, votes, active)]
                got = np.asarray(shape_rewards(cfg, moved[0], moved[1], gold, moved[2]))
                np.testing.assert_array_equal(got, base[:, :, perm], err_msg=f"{name} {params} {credit} {perm}")


def test_exchangeable_agents_get_equal_mean_abs_credit():
    """2048 groups of G=4 debates, 3 agents x 2 rounds, votes uniform over 3 answers, gold one of them."""
    rng = np.random.default_rng(0)
    shape = (2048, 4, 3, 2)
    votes = rng.integers(0, 3, shape).astype(np.int32)
    gold = rng.integers(0, 3, shape[0]).astype(np.int32)
    active = np.ones(shape, bool)
    correct = (votes == gold[:, None, None, None]).astype(np.float32)
    for name, params in (("difference_rewards", {}), ("coma_advantage", {"n_rollouts_per_prompt": 4})):
        for credit in ("turn", "return"):
            cfg = ShapingConfig(name, params, credit=credit)
            credit_abs = np.abs(np.asarray(shape_rewards(cfg, correct, votes, gold, active)))
            per_agent = credit_abs.mean(axis=(0, 1, 3))
            assert per_agent.min() > 0.05, (name, credit, per_agent)
            assert per_agent.max() / per_agent.min() < 1.15, (name, credit, per_agent)
