"""The policy-loss variants (ppo_clip, gspo, cispo) and the sequence_sum aggregation against plain
NumPy references on a hand-built batch whose first row packs two sequences; the learner updating
with each variant on a tiny model; the config fields; the step's per-agent metrics."""

from __future__ import annotations

import itertools
import math
import typing
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.config import LossConfig, OptimizerConfig
from jaxdebate.configlib import apply_overrides, load_config
from jaxdebate.data.items import Item
from jaxdebate.debate.batch import DebateBatch, Turn
from jaxdebate.errors import ConfigError
from jaxdebate.model import load
from jaxdebate.rl.batching import Sample, make_microbatches
from jaxdebate.rl.grpo import Learner
from jaxdebate.rl.losses import AGGREGATIONS, POLICY_LOSSES, metric_sums, policy_loss, sequence_means, token_weights
from jaxdebate.rl.step import training_samples
from jaxdebate.rl.step_metrics import response_lengths, train_metrics
from jaxdebate.shaping import ESTIMATORS, ShapingConfig, compute_advantages

# Row 0 packs two sequences (window positions 0-1 and 2-4), row 1 holds one (0-3); the rest is padding.
IDS = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
MASK = IDS > 0
SEQ_ADV = {(0, 1): 1.0, (0, 2): -0.5, (1, 1): 2.0}
ADV = np.array([[SEQ_ADV.get((r, k), 0.0) for k in row] for r, row in enumerate(IDS)])
OLD = np.array([[-1.0, -2.0, -0.7, -1.5, -0.3, 0.0], [-0.9, -1.1, -2.5, -0.6, 0.0, 0.0]])
# lp - old: row 0 seq 1 mean +0.1 (s inside the clip; its token 0 ratio e^0.3 above 1 + 0.25),
# row 0 seq 2 mean -0.25 with A < 0 (s = 0.78 below 1 - 0.2: the whole sequence is clipped),
# row 1 mean -0.0625 (inside; its token 1 ratio e^-0.4 is below 1 - 0.2, A > 0: ppo does not clip it)
DIFF = np.array([[0.3, -0.1, -0.3, -0.2, -0.25, 0.0], [0.05, -0.4, 0.1, 0.0, 0.0, 0.0]])
LP = OLD + DIFF
SMP = OLD - np.array([[0.3, 0.0, -0.1, 1.2, 0.2, 0.0], [0.0, 0.5, -0.2, 0.1, 0.0, 0.0]])  # w capped at (0, 3)
REF = LP + np.array([[-0.1, 0.2, 0.0, 0.3, -0.2, 0.0], [0.1, 0.0, -0.1, 0.05, 0.0, 0.0]])
LOW, HIGH, CAP, BETA, MAX_COMPLETION = 0.2, 0.25, 2.0, 0.1, 8


def _sequences(ids=IDS):
    return [(r, k, np.flatnonzero(ids[r] == k)) for r in range(len(ids)) for k in sorted(set(ids[r]) - {0})]


def _weights(aggregation, ids=IDS):
    """The step's token weights, sequence by sequence (a packed row holds several)."""
    seqs = _sequences(ids)
    total_tokens, w = sum(len(t) for *_, t in seqs), np.zeros(ids.shape)
    for r, _, t in seqs:
        w[r, t] = {"token": 1 / total_tokens, "sequence": 1 / (len(t) * len(seqs)),
                   "sequence_sum": 1 / (MAX_COMPLETION * len(seqs))}[aggregation]
    return w


def _np_pg(variant, lp, old, adv, ids, weight_lp=None):
    """(pg, clipped, dpg/dlp): token by token, from each variant's paper formula (gspo's dpg/dlp
    through s_i is added by ``_np_loss``). ``weight_lp``: the log-probs cispo's weight is computed
    from (default ``lp``; fixed, it is the stop-gradient a finite difference must respect)."""
    weight_lp = lp if weight_lp is None else weight_lp
    pg, clipped, grad = np.zeros(lp.shape), np.zeros(lp.shape, bool), np.zeros(lp.shape)
    for r, _, t in _sequences(ids):
        a = adv[r, t[0]]
        s = math.exp(float(np.mean(lp[r, t] - old[r, t])))
        for j in t:
            ratio = math.exp(lp[r, j] - old[r, j])
            if variant == "cispo":
                w = min(max(math.exp(weight_lp[r, j] - old[r, j]), 1 - LOW), 1 + HIGH)
                pg[r, j], grad[r, j] = -w * a * lp[r, j], -w * a
                clipped[r, j] = not 1 - LOW <= ratio <= 1 + HIGH
                continue
            x = s if variant == "gspo" else ratio
            bounded = min(max(x, 1 - LOW), 1 + HIGH)
            pg[r, j] = -min(x * a, bounded * a)
            clipped[r, j] = bounded * a < x * a
            if variant == "ppo_clip" and not clipped[r, j]:
                grad[r, j] = -ratio * a
    return pg, clipped, grad


def _np_loss(variant, aggregation, lp, ids=IDS, adv=ADV, old=OLD, smp=SMP, ref=REF, beta=BETA, weight_lp=None):
    """(loss, d loss / d lp) of ``sum tw * (w * pg + beta * kl)`` in float64."""
    tw = _weights(aggregation, ids)
    w = np.minimum(np.exp(old - smp), CAP)
    pg, _, dpg = _np_pg(variant, lp, old, adv, ids, weight_lp)
    log_r = ref - lp
    kl = np.exp(log_r) - log_r - 1
    loss = float(np.sum(tw * (w * pg + beta * kl) * (ids > 0)))
    grad = tw * (w * dpg + beta * (1 - np.exp(log_r))) * (ids > 0)
    if variant == "gspo":  # s_i depends on every token of its sequence: d s_i / d lp_t = s_i / n_i
        _, clipped, _ = _np_pg(variant, lp, old, adv, ids)
        for r, _, t in _sequences(ids):
            if not clipped[r, t[0]]:
                s = math.exp(float(np.mean(lp[r, t] - old[r, t])))
                grad[r, t] += np.sum(tw[r, t] * w[r, t]) * -adv[r, t[0]] * s / len(t)
    return loss, grad


def _jax_loss(variant, aggregation, lp, ids=IDS, adv=ADV, old=OLD, smp=SMP, ref=REF, beta=BETA):
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return policy_loss(f32(lp), f32(old), f32(smp), f32(ref), f32(adv), f32(_weights(aggregation, ids)),
                       clip_low=LOW, clip_high=HIGH, is_cap=CAP, beta=beta, variant=variant,
                       sequence_ids=jnp.asarray(ids))


# ------------------------------------------------------------------------------ the pure functions

def test_the_reference_gradient_is_the_derivative_of_the_reference_loss():
    """Central differences of the float64 reference (cispo's weight held fixed: its stop-gradient)."""
    h = 1e-6
    for variant, aggregation in itertools.product(POLICY_LOSSES, ("token", "sequence", "sequence_sum")):
        _, grad = _np_loss(variant, aggregation, LP)
        fd = np.zeros(LP.shape)
        for idx in zip(*np.nonzero(MASK)):
            up, down = LP.copy(), LP.copy()
            up[idx] += h
            down[idx] -= h
            at = lambda x: _np_loss(variant, aggregation, x, weight_lp=LP)[0]  # noqa: E731
            fd[idx] = (at(up) - at(down)) / (2 * h)
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8, err_msg=f"{variant}/{aggregation}")


@pytest.mark.parametrize("variant", POLICY_LOSSES)
@pytest.mark.parametrize("aggregation", ["token", "sequence", "sequence_sum"])
def test_each_variant_matches_its_numpy_reference(variant, aggregation):
    expected, expected_grad = _np_loss(variant, aggregation, LP)
    loss, terms = _jax_loss(variant, aggregation, LP)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    grad = jax.grad(lambda x: _jax_loss(variant, aggregation, x)[0])(jnp.asarray(LP, jnp.float32))
    np.testing.assert_allclose(np.asarray(grad), expected_grad, rtol=2e-5, atol=1e-7)
    assert np.all(np.asarray(grad)[~MASK] == 0)
    _, clipped, _ = _np_pg(variant, LP, OLD, ADV, IDS)
    np.testing.assert_array_equal(np.asarray(terms.clipped) & MASK, clipped)
    sums, _ = metric_sums(terms, jnp.asarray(MASK), jnp.asarray(OLD, jnp.float32), jnp.asarray(SMP, jnp.float32))
    assert float(sums["clip_fraction"]) == clipped.sum()


def test_which_tokens_each_variant_clips():
    clipped = {v: _np_pg(v, LP, OLD, ADV, IDS)[1] for v in POLICY_LOSSES}
    # ppo: token (0,0) (ratio e^0.3 > 1.25, A > 0) and the A < 0 tokens of row 0 with ratio < 0.8
    np.testing.assert_array_equal(np.argwhere(clipped["ppo_clip"]), [[0, 0], [0, 2], [0, 4]])
    # gspo: all of row 0's second sequence (s = e^-0.25 < 0.8, A < 0), nothing else
    np.testing.assert_array_equal(np.argwhere(clipped["gspo"]), [[0, 2], [0, 3], [0, 4]])
    # cispo: every token whose ratio leaves [0.8, 1.25], whatever A's sign ((1,1): e^-0.4, A > 0)
    np.testing.assert_array_equal(np.argwhere(clipped["cispo"]), [[0, 0], [0, 2], [0, 4], [1, 1]])


def test_gspo_gives_each_packed_sequence_its_own_ratio():
    _, terms = _jax_loss("gspo", "sequence", LP)
    ratio = np.asarray(terms.ratio)
    for r, k, t in _sequences(IDS):
        np.testing.assert_allclose(ratio[r, t], math.exp(float(np.mean(DIFF[r, t]))), rtol=1e-6)
    assert not np.isclose(ratio[0, 0], ratio[0, 2])
    # the same three sequences one per row: the same loss and the same gradient token by token
    rows = [(0, slice(0, 2)), (0, slice(2, 5)), (1, slice(0, 4))]
    unpack = lambda x: np.stack([np.pad(x[r, s], (0, 6 - (s.stop - s.start))) for r, s in rows])  # noqa: E731
    ids = np.stack([np.pad(np.ones(s.stop - s.start, int), (0, 6 - (s.stop - s.start))) for _, s in rows])
    args = dict(ids=ids, adv=unpack(ADV), old=unpack(OLD), smp=unpack(SMP), ref=unpack(REF))
    for aggregation in ("token", "sequence", "sequence_sum"):
        packed = float(_jax_loss("gspo", aggregation, LP)[0])
        alone = float(_jax_loss("gspo", aggregation, unpack(LP), **args)[0])
        assert packed == pytest.approx(alone, rel=1e-6)
        g_packed = jax.grad(lambda x: _jax_loss("gspo", aggregation, x)[0])(jnp.asarray(LP, jnp.float32))
        g_alone = jax.grad(lambda x: _jax_loss("gspo", aggregation, x, **args)[0])(
            jnp.asarray(unpack(LP), jnp.float32))
        np.testing.assert_allclose(unpack(np.asarray(g_packed)), np.asarray(g_alone), rtol=1e-6, atol=1e-9)


def test_sequence_means_per_row_and_id():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = np.asarray(sequence_means(jnp.asarray(x), jnp.asarray(IDS)))
    np.testing.assert_allclose(out, [[0.5, 0.5, 3, 3, 3, 0], [7.5, 7.5, 7.5, 7.5, 0, 0]])


def test_on_policy_every_variant_has_the_gradient_minus_w_a():
    """lp == old: ppo_clip and cispo give each token ``-tw * w * A``; gspo gives each token of a
    sequence the sequence's mean of ``tw * w`` times ``-A`` (the same where the sampler is the learner)."""
    tw, w = _weights("token"), np.minimum(np.exp(OLD - SMP), CAP)
    mean_w = np.zeros(w.shape)
    for r, _, t in _sequences(IDS):
        mean_w[r, t] = w[r, t].mean()
    for smp in (OLD, SMP):
        for variant in POLICY_LOSSES:
            grad = jax.grad(lambda x: _jax_loss(variant, "token", x, old=jax.lax.stop_gradient(x), smp=smp,
                                                beta=0.0)[0])(jnp.asarray(OLD, jnp.float32))
            weight = np.minimum(np.exp(OLD - smp), CAP) if variant != "gspo" or smp is OLD else mean_w
            np.testing.assert_allclose(np.asarray(grad), -weight * ADV * tw, rtol=1e-6, atol=1e-8, err_msg=variant)


def test_gspo_needs_sequence_ids_and_unknown_names_are_refused():
    f32 = jnp.asarray(OLD, jnp.float32)
    kw = dict(clip_low=LOW, clip_high=HIGH, is_cap=CAP, beta=0.0)
    with pytest.raises(ValueError, match="window_sequence"):
        policy_loss(f32, f32, f32, f32, f32, f32, variant="gspo", **kw)
    with pytest.raises(ValueError, match="unknown policy loss 'grpo'"):
        policy_loss(f32, f32, f32, f32, f32, f32, variant="grpo", **kw)
    with pytest.raises(ValueError, match="max_completion"):
        token_weights(MASK, "sequence_sum", total_tokens=9, total_sequences=3)
    with pytest.raises(ValueError, match="sequence_sum"):
        token_weights(MASK, "tokens", total_tokens=9, total_sequences=3)


# ------------------------------------------------------------------------------ batching

def _samples(rng, n=6, prompt_len=8, vocab=256):
    prompt = rng.integers(0, vocab, prompt_len)  # one shared prompt: the samples pack into one row
    return [Sample(prompt, rng.integers(0, vocab, c), rng.normal(-3.0, 0.5, c).astype(np.float32), a)
            for c, a in zip((3, 5, 2, 6, 4, 1)[:n], (1.0, -1.0, 0.5, -0.5, 2.0, -2.0))]


@pytest.mark.parametrize("packing", [True, False])
def test_window_sequence_names_each_sample_of_a_row(packing):
    samples = _samples(np.random.default_rng(0))
    mbs, _ = make_microbatches(samples, max_len=64, rows_cap=8, max_tokens=4096, aggregation="token",
                               packing=packing)
    seen = []
    for mb in mbs:
        ws = mb["window_sequence"]
        assert ws.dtype == np.int32 and ws.shape == mb["loss_mask"].shape
        np.testing.assert_array_equal(ws > 0, mb["loss_mask"])
        for r in range(ws.shape[0]):
            ids = ws[r][ws[r] > 0]
            n = int(ids.max()) if len(ids) else 0
            assert list(dict.fromkeys(ids.tolist())) == list(range(1, n + 1))  # 1, 2, ... in window order
            for k in range(1, n + 1):
                at = np.flatnonzero(ws[r] == k)
                assert np.all(np.diff(at) == 1)  # contiguous, one advantage per sequence
                assert len(set(mb["advantages"][r, at])) == 1
                seen.append((len(at), float(mb["advantages"][r, at[0]])))
    assert sorted(seen) == sorted((len(s.completion), s.advantage) for s in samples)
    if packing:
        assert max(mb["window_sequence"].max() for mb in mbs) > 1  # some row really holds several


def test_sequence_sum_weights_do_not_depend_on_lengths():
    samples = _samples(np.random.default_rng(1))
    (mb,), _ = make_microbatches(samples, max_len=64, rows_cap=8, max_tokens=4096, aggregation="sequence_sum",
                                 max_completion=16)
    w = mb["token_weights"][mb["loss_mask"]]
    np.testing.assert_allclose(w, 1 / (16 * len(samples)))
    assert mb["token_weights"].sum() == pytest.approx(sum(len(s.completion) for s in samples) / (16 * 6))
    np.testing.assert_allclose(token_weights(MASK, "sequence_sum", total_tokens=9, total_sequences=3,
                                             max_completion=MAX_COMPLETION), _weights("sequence_sum"))


# ------------------------------------------------------------------------------ the learner, end to end

TINY = "tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=256,seed=5"


@pytest.fixture(scope="module")
def tiny():
    return load(TINY)


@pytest.mark.parametrize("variant", POLICY_LOSSES)
def test_the_learner_updates_with_each_policy_loss(tiny, variant):
    """Two updates on packed rows; the second is off-policy (old = before the first), and its loss is
    the NumPy reference's on the learner's own log-probs."""
    params, config = tiny
    aggregation = {"ppo_clip": "token", "gspo": "sequence", "cispo": "sequence_sum"}[variant]
    loss = LossConfig(policy_loss=variant, aggregation=aggregation, beta=0.0, clip_eps=LOW, clip_eps_high=HIGH)
    learner = Learner(config, loss, OptimizerConfig(peak_lr=3e-2, end_lr=3e-2, schedule="constant"), 4)
    state = learner.init_state(jax.tree.map(jnp.copy, params))
    mbs, _ = make_microbatches(_samples(np.random.default_rng(2)), max_len=64, rows_cap=8, max_tokens=4096,
                               aggregation=aggregation, max_completion=MAX_COMPLETION)
    assert max(mb["window_sequence"].max() for mb in mbs) > 1
    mbs = [dict(mb, old_logprobs=learner.logprobs(state.params, mb)) for mb in mbs]
    state, first = learner.update(state, mbs)
    assert first["ratio"] == pytest.approx(1.0) and first["clip_fraction"] == 0.0
    lps = [np.asarray(learner.logprobs(state.params, mb), np.float64) for mb in mbs]
    state, second = learner.update(state, mbs)
    assert np.isfinite(second["loss"]) and second["grad_norm"] > 0 and second["nonfinite/params"] == 0.0
    assert 0.0 <= second["clip_fraction"] <= 1.0 and second["ratio"] != pytest.approx(1.0)
    expected = 0.0
    for mb, lp in zip(mbs, lps):
        tw = mb["token_weights"].astype(np.float64)
        w = np.minimum(np.exp(np.asarray(mb["old_logprobs"], np.float64) - mb["sampler_logprobs"]), 2.0)
        pg, _, _ = _np_pg(variant, lp, np.asarray(mb["old_logprobs"], np.float64), mb["advantages"],
                          mb["window_sequence"])
        expected += float(np.sum(tw * w * pg))
    assert second["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)


# ------------------------------------------------------------------------------ config

def test_config_fields_validate_and_default_to_the_seeds_loss():
    hints = typing.get_type_hints(LossConfig)
    assert typing.get_args(hints["policy_loss"]) == POLICY_LOSSES
    assert typing.get_args(hints["aggregation"]) == AGGREGATIONS
    assert typing.get_args(hints["estimator"]) == ESTIMATORS
    d = LossConfig()
    assert (d.policy_loss, d.estimator, d.aggregation, d.per_agent_norm) == ("ppo_clip", "grpo", "token", False)
    for field, bad in (("policy_loss", "grpo"), ("estimator", "drgrpo"), ("aggregation", "seq-mean"),
                       ("per_agent_norm", "yes")):
        with pytest.raises(ConfigError, match=f"loss\\.{field}"):
            LossConfig(**{field: bad})


def test_every_combination_works_through_set():
    base = load_config(Path(__file__).resolve().parents[2] / "configs" / "smoke.py")
    for variant, estimator, aggregation, per_agent, grouping in itertools.product(
            POLICY_LOSSES, ("grpo", "rloo", "dr_grpo"), ("token", "sequence", "sequence_sum"),
            ("true", "false"), ("prompt", "agent_round")):
        c = apply_overrides(base, [f"loss.policy_loss={variant}", f"loss.estimator={estimator}",
                                   f"loss.aggregation={aggregation}", f"loss.per_agent_norm={per_agent}",
                                   f"loss.grouping={grouping}"])
        assert (c.loss.policy_loss, c.loss.estimator, c.loss.aggregation) == (variant, estimator, aggregation)
        assert c.loss.per_agent_norm is (per_agent == "true")
    for override in ("loss.policy_loss=vanilla", "loss.aggregation=seq-mean-token-sum", "loss.estimator=dr-grpo",
                     "loss.per_agent_norm=2"):
        with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
            apply_overrides(base, [override])


# ------------------------------------------------------------------------------ step and metrics

def _debate_batch() -> DebateBatch:
    """1 item x 2 rollouts x 2 agents x 2 rounds; rollout 1's agent 1 skipped round 1."""
    correct = np.array([[[[1, 1], [0, 1]], [[0, 0], [1, 0]]]], np.float32)
    active = np.ones(correct.shape, bool)
    active[0, 1, 1, 1] = False
    lengths = {(0, 0, 0): 4, (0, 0, 1): 6, (0, 1, 0): 2, (0, 1, 1): 8, (1, 0, 0): 3, (1, 0, 1): 5, (1, 1, 0): 7}
    turns = tuple(Turn(index=(0, g, a, r), item_id="q", prompt_ids=(1, 2), completion_ids=(3,) * n,
                       logprobs=(-0.5,) * n, truncated=False, weight_version=0, text="", answer=None)
                  for (g, a, r), n in lengths.items())
    votes = np.where(active, np.where(correct > 0, 0, 1), -1).astype(np.int32)
    item = Item(id="q", problem="1+1", answer="2", env="math")
    return DebateBatch(items=(item,), env_names=("math_debate",), correct=correct, votes=votes,
                       gold=np.array([0], np.int32), active=active, turns=turns, classes=(("2", "3"),),
                       stats={"completion_tokens": 35})


def test_response_lengths_by_agent_and_round():
    m = response_lengths(_debate_batch())
    assert m["completion_tokens/agent_0"] == pytest.approx((4 + 6 + 3 + 5) / 4)
    assert m["completion_tokens/agent_1"] == pytest.approx((2 + 8 + 7) / 3)
    assert m["completion_tokens/round_0"] == pytest.approx((4 + 2 + 3 + 7) / 4)
    assert m["completion_tokens/round_1"] == pytest.approx((6 + 8 + 5) / 3)


def test_training_samples_pass_per_agent_norm_and_the_step_logs_per_agent_metrics():
    batch = _debate_batch()
    for per_agent in (False, True):
        loss = LossConfig(estimator="dr_grpo", per_agent_norm=per_agent, filter_zero_signal=False)
        signal = training_samples(batch, ShapingConfig("identity", {}), loss)
        expected = np.asarray(compute_advantages(batch.correct, batch.active, estimator="dr_grpo",
                                                 grouping="prompt", per_agent=per_agent))
        np.testing.assert_allclose(signal.advantages, expected)
        assert [s.advantage for s in signal.samples] == pytest.approx([expected[t.index] for t in batch.turns])
    m = train_metrics(batch, reward={}, advantages=signal.advantages, learner={}, layout={}, updated=True,
                      step=1, sampler_version=0, ref_version=0, sampler_stats={},
                      filters={"zero_advantage_fraction": 0.0, "truncated_fraction": 0.0, "kept_fraction": 1.0,
                               "n_kept": 7})
    adv0 = signal.advantages[0, :, 0][batch.active[0, :, 0]]
    assert m["train/advantage_abs_mean/agent_0"] == pytest.approx(np.abs(adv0).mean())
    assert m["train/advantage_std/agent_0"] == pytest.approx(adv0.std())
    assert m["train/completion_tokens/round_1"] == pytest.approx(19 / 3)
    assert all(type(v) is float for v in m.values())
