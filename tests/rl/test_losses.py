"""The policy loss against a hand-computed 2-sequence example; KL is 0 when policy == reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.config import LossConfig, OptimizerConfig
from jaxdebate.model import load
from jaxdebate.rl.batching import Sample, make_microbatches
from jaxdebate.rl.grpo import Learner
from jaxdebate.rl.losses import metric_sums, policy_loss, token_weights

# Two sequences of 3 positions; sequence 0 has 2 completion tokens, sequence 1 has 3.
LP = [[-1.0, -2.0, 0.0], [-0.5, -0.3, -0.8]]        # current policy
OLD = [[-1.2, -1.9, 0.0], [-0.5, -0.6, -0.8]]       # learner before the update
SMP = [[-1.5, -1.9, 0.0], [-0.4, -0.6, -2.0]]       # sampler
REF = [[-1.1, -2.2, 0.0], [-0.5, -0.3, -0.8]]       # reference policy
MASK = [[1, 1, 0], [1, 1, 1]]
ADV = [1.0, -2.0]
CLIP, CAP, BETA = 0.2, 2.0, 0.1

# Token by token (ratio = e^(lp-old), w = min(e^(old-smp), 2), kl = e^(ref-lp) - (ref-lp) - 1):
#  (0,0) ratio e^0.2=1.2214 > 1.2, A=+1 -> clipped: pg = -1.2;        w = e^0.3 = 1.34986; kl = e^-0.1+0.1-1
#  (0,1) ratio e^-0.1=0.90484, A=+1 -> pg = -0.90484;                  w = 1;              kl = e^-0.2+0.2-1
#  (1,0) ratio 1, A=-2 -> pg = 2;                                      w = e^-0.1;         kl = 0
#  (1,1) ratio e^0.3=1.34986, A=-2 -> unclipped is smaller: pg = 2.69972; w = 1;            kl = 0
#  (1,2) ratio 1, A=-2 -> pg = 2;                                      w = min(e^1.2, 2) = 2 (capped)
e = math.exp
kl = lambda d: e(d) - d - 1  # noqa: E731  (d = ref - lp)
PER_TOKEN = [                                   # w * pg + beta * kl, from the lines above
    e(0.3) * -1.2 + BETA * kl(-0.1),
    1.0 * -e(-0.1) + BETA * kl(-0.2),
    e(-0.1) * 2.0,
    1.0 * 2.0 * e(0.3),
    2.0 * 2.0,
]
TOKEN_MEAN = sum(PER_TOKEN) / 5                                                  # = 1.19742
SEQUENCE_MEAN = (sum(PER_TOKEN[:2]) / 2 + sum(PER_TOKEN[2:]) / 3) / 2             # = 0.78765


@pytest.mark.parametrize("aggregation,expected", [("token", TOKEN_MEAN), ("sequence", SEQUENCE_MEAN)])
def test_loss_matches_hand_computation(aggregation, expected):
    mask = np.array(MASK, bool)
    weights = token_weights(mask, aggregation, total_tokens=5, total_sequences=2)
    arr = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    loss, terms = policy_loss(arr(LP), arr(OLD), arr(SMP), arr(REF), arr(ADV), arr(weights),
                              clip_low=CLIP, clip_high=CLIP, is_cap=CAP, beta=BETA)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    sums, maxes = metric_sums(terms, jnp.asarray(mask), arr(OLD), arr(SMP))
    assert float(sums["tokens"]) == 5
    assert float(sums["clip_fraction"]) == 1            # only token (0,0)
    assert float(sums["is_capped_fraction"]) == 1       # only token (1,2)
    assert float(maxes["logprob_max_abs_mismatch"]) == pytest.approx(1.2, rel=1e-6)


def test_loss_gradient_is_advantage_times_weight_on_policy():
    """On-policy (lp == old) and beta = 0: d loss / d lp = -w * A * token_weight."""
    lp = jnp.asarray(OLD, jnp.float32)
    weights = jnp.asarray(token_weights(np.array(MASK, bool), "token", total_tokens=5, total_sequences=2))
    grad = jax.grad(lambda x: policy_loss(x, lp, jnp.asarray(SMP), lp, jnp.asarray(ADV), weights,
                                          clip_low=CLIP, clip_high=CLIP, is_cap=CAP, beta=0.0)[0])(lp)
    w = np.minimum(np.exp(np.array(OLD) - np.array(SMP)), CAP)
    expected = -w * np.array(ADV)[:, None] * np.array(MASK) / 5
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-6, atol=1e-7)


def test_kl_is_zero_when_policy_equals_reference_and_positive_after_an_update():
    params, config = load("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=256")
    learner = Learner(config, LossConfig(beta=1.0), OptimizerConfig(peak_lr=1e-2, end_lr=1e-2), 10)
    state = learner.init_state(params)
    rng = np.random.default_rng(0)
    samples = [Sample(rng.integers(0, 256, 12), c := rng.integers(0, 256, 9), np.full(9, -5.5), a)
               for a in (1.0, -1.0, 0.5, -0.5)]
    mbs, _ = make_microbatches(samples, max_len=64, rows_cap=4, max_tokens=4096, aggregation="token")
    state, metrics = learner.update(state, mbs)
    assert metrics["kl"] == 0.0 and metrics["tokens"] == 36
    assert metrics["ratio"] == pytest.approx(1.0)
    state, metrics = learner.update(state, mbs)
    assert metrics["kl"] > 1e-6
