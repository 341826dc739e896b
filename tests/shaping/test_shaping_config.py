"""ShapingConfig and shape_rewards input validation: clear ConfigError/ValueError before any compute."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from jaxdebate.errors import ConfigError
from jaxdebate.shaping import ShapingConfig, shape_rewards

GOOD = {
    "identity": {},
    "difference_rewards": {},
    "potential_based": {"gamma": 0.99, "potential_type": "debate_length"},
    "coma_advantage": {"n_rollouts_per_prompt": 4},
    "reward_mixing": {"alpha": 0.5},
}


@pytest.mark.parametrize("strategy", sorted(GOOD))
def test_seed_configs_build_and_serialise_to_plain_types(strategy):
    cfg = ShapingConfig(strategy, GOOD[strategy])
    cfg.check_group_size(4)
    plain = dataclasses.asdict(cfg)
    assert plain == {"strategy": strategy, "params": GOOD[strategy], "credit": "turn", "discount": 1.0}
    assert type(plain["params"]) is dict
    assert ShapingConfig(**json.loads(json.dumps(plain))) == cfg
    assert hash(ShapingConfig(**plain)) == hash(cfg)
    ret = ShapingConfig(strategy, GOOD[strategy], credit="return", discount=0.9)
    assert ShapingConfig(**json.loads(json.dumps(dataclasses.asdict(ret)))) == ret != cfg
    assert hash(ret) != hash(cfg)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"credit": "returns"}, r"^shaping\.credit must be one of \['turn', 'return'\], got 'returns'"),
        ({"credit": None}, r"^shaping\.credit must not be None"),
        ({"discount": 0.0}, r"^shaping\.discount must be in \(0, 1\], got 0\.0"),
        ({"discount": 1.5}, r"^shaping\.discount must be in \(0, 1\], got 1\.5"),
        ({"discount": -0.1, "credit": "return"}, r"^shaping\.discount must be in \(0, 1\]"),
        ({"discount": "0.9"}, r"^shaping\.discount must be a number"),
        ({"discount": math.nan}, r"^shaping\.discount must be a finite number"),
    ],
)
def test_bad_credit_or_discount_names_the_field(fields, message):
    with pytest.raises(ConfigError, match=message):
        ShapingConfig("identity", {}, **fields)


def test_credit_and_discount_boundaries_are_accepted():
    assert ShapingConfig("identity", {}, credit="return", discount=1).discount == 1.0
    assert ShapingConfig("identity", {}, credit="return", discount=1e-9).credit == "return"


def test_default_is_identity_and_values_are_normalised():
    assert ShapingConfig() == ShapingConfig("identity", {})
    cfg = ShapingConfig("potential_based", {"gamma": 1, "potential_type": "agreement"})
    assert cfg.params["gamma"] == 1.0 and type(cfg.params["gamma"]) is float
    assert type(ShapingConfig("reward_mixing", {"alpha": 0}).params["alpha"]) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.strategy = "identity"


@pytest.mark.parametrize(
    "strategy, params, message",
    [
        ("comma", {}, r"shaping.strategy: unknown strategy 'comma'; known: coma_advantage, difference_rewards, identity, potential_based, reward_mixing"),
        (None, {}, r"shaping.strategy must not be None"),
        ("identity", {"alpha": 0.5}, r"shaping.params.alpha: unknown key for strategy identity \(expected no params\)"),
        ("reward_mixing", {}, r"shaping.params.alpha: missing, strategy reward_mixing needs alpha"),
        ("reward_mixing", {"alpha": 0.5, "beta": 1.0}, r"shaping.params.beta: unknown key .*expected alpha"),
        ("potential_based", {"gamma": 0.9}, r"shaping.params.potential_type: missing, strategy potential_based needs gamma, potential_type"),
        ("potential_based", {"potential_type": "agreement"}, r"shaping.params.gamma: missing"),
        ("potential_based", {"gamma": 0.0, "potential_type": "agreement"}, r"shaping.params.gamma must be in \(0, 1\]"),
        ("potential_based", {"gamma": 1.01, "potential_type": "agreement"}, r"shaping.params.gamma must be in \(0, 1\]"),
        ("potential_based", {"gamma": math.nan, "potential_type": "agreement"}, r"shaping.params.gamma must be a finite number"),
        ("potential_based", {"gamma": -0.5, "potential_type": "agreement"}, r"shaping.params.gamma"),
        ("potential_based", {"gamma": "0.9", "potential_type": "agreement"}, r"shaping.params.gamma must be a number, got \'0.9\' \(strategy potential_based\)"),
        ("potential_based", {"gamma": 0.9, "potential_type": "length"}, r"shaping.params.potential_type must be one of debate_length, agreement"),
        ("potential_based", {"gamma": 0.9, "potential_type": 1}, r"shaping.params.potential_type must be a string, got 1 \(strategy potential_based\)"),
        ("reward_mixing", {"alpha": -0.1}, r"shaping.params.alpha must be in \[0, 1\]"),
        ("reward_mixing", {"alpha": 1.5}, r"shaping.params.alpha must be in \[0, 1\]"),
        ("reward_mixing", {"alpha": True}, r"shaping.params.alpha must be a number, got True \(strategy reward_mixing\)"),
        ("coma_advantage", {"n_rollouts_per_prompt": 4.0}, r"shaping.params.n_rollouts_per_prompt must be an integer, got 4.0 \(strategy coma_advantage\)"),
        ("coma_advantage", {"n_rollouts_per_prompt": 0}, r"shaping.params.n_rollouts_per_prompt must be >= 1"),
        ("coma_advantage", {}, r"shaping.params.n_rollouts_per_prompt: missing"),
        ("identity", [("alpha", 1)], r"shaping.params must be a mapping, got \[\(.alpha., 1\)\]"),
    ],
)
def test_invalid_configs_name_the_field(strategy, params, message):
    with pytest.raises(ConfigError, match=message):
        ShapingConfig(strategy, params)


def test_boundaries_are_accepted():
    ShapingConfig("potential_based", {"gamma": 1.0, "potential_type": "agreement"})
    ShapingConfig("potential_based", {"gamma": 1e-9, "potential_type": "debate_length"})
    ShapingConfig("reward_mixing", {"alpha": 0.0})
    ShapingConfig("reward_mixing", {"alpha": 1.0})


def test_coma_rollout_count_must_match_group_size():
    cfg = ShapingConfig("coma_advantage", {"n_rollouts_per_prompt": 4})
    cfg.check_group_size(4)
    with pytest.raises(ConfigError, match=r"shaping.params.n_rollouts_per_prompt=4 must equal .* G=8"):
        cfg.check_group_size(8)
    ShapingConfig("reward_mixing", {"alpha": 0.5}).check_group_size(8)  # no rollout param: any G
    with pytest.raises(ConfigError, match="generations_per_prompt"):
        cfg.check_group_size(0)


def _batch(shape=(2, 4, 3, 2)):
    rng = np.random.default_rng(0)
    return (
        rng.integers(0, 2, shape).astype(np.float32),
        rng.integers(-1, 3, shape).astype(np.int32),
        rng.integers(-1, 3, shape[:1]).astype(np.int32),
        np.ones(shape, bool),
    )


def test_shape_rewards_checks_the_group_size_before_compute():
    c, v, g, a = _batch()
    with pytest.raises(ConfigError, match=r"n_rollouts_per_prompt=3 must equal .* G=4"):
        shape_rewards(ShapingConfig("coma_advantage", {"n_rollouts_per_prompt": 3}), c, v, g, a)


def test_shape_rewards_has_one_call_form():
    """A ShapingConfig, then the four arrays; the old (strategy, params, arrays...) form is gone."""
    c, v, g, a = _batch()
    cfg = ShapingConfig("potential_based", {"gamma": 0.9, "potential_type": "agreement"})
    assert np.abs(np.asarray(shape_rewards(cfg, c, v, g, a))).sum() > 0
    with pytest.raises(TypeError, match=r"takes 5 positional arguments but 6 were given"):
        shape_rewards("potential_based", dict(cfg.params), c, v, g, a)
    with pytest.raises(TypeError, match=r"config must be a ShapingConfig, got dict"):
        shape_rewards(dict(cfg.params), c, v, g, a)
    with pytest.raises(TypeError):
        shape_rewards(cfg, c, v, g)


IDENTITY = ShapingConfig("identity", {})


def test_shape_rewards_names_the_bad_tensor():
    c, v, g, a = _batch()
    with pytest.raises(ValueError, match=r"`correct` must be \[B, G, A, R\], got shape \(4, 3, 2\)"):
        shape_rewards(IDENTITY, c[0], v, g, a)
    with pytest.raises(ValueError, match=r"must share one shape; got correct \(2, 4, 3, 2\), votes \(2, 4, 3, 3\)"):
        shape_rewards(IDENTITY, c, np.zeros((2, 4, 3, 3), np.int32), g, a)
    with pytest.raises(ValueError, match=r"`gold` must be \[B\]=\(2,\), got shape \(3,\)"):
        shape_rewards(IDENTITY, c, v, np.zeros(3, np.int32), a)
    with pytest.raises(ValueError, match=r"`votes` must hold integer class ids, got dtype float32"):
        shape_rewards(IDENTITY, c, v.astype(np.float32), g, a)


def test_a_float_param_without_a_validator_must_be_finite():
    """Issue 14 item 7: a strategy's unvalidated float param accepted inf/nan."""
    from jaxdebate.shaping.registry import Param

    param = Param("scale", float)
    assert param.check(2, "custom") == 2.0
    for bad in (math.inf, -math.inf, math.nan, 1e400):
        with pytest.raises(ConfigError, match=r"^shaping\.params\.scale must be a finite number, got .* \(strategy custom\)"):
            param.check(bad, "custom")
