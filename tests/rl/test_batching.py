"""Micro-batching: bounded set of shapes (so the step compiles a bounded number of times), padding
rows carry no weight, and splitting a step into many micro-batches gives the same update as one."""

import jax
import numpy as np
import pytest

from jaxdebate.config import LossConfig, OptimizerConfig
from jaxdebate.model import load
from jaxdebate.rl.batching import Sample, length_buckets, make_microbatches, possible_shapes, window_buckets

TINY = "tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=256"


def _samples(rng, n, max_prompt=40, max_completion=60):
    out = []
    for _ in range(n):
        c = int(rng.integers(1, max_completion))
        out.append(Sample(rng.integers(0, 256, int(rng.integers(1, max_prompt))), rng.integers(0, 256, c),
                          rng.normal(-5, 1, c), float(rng.normal())))
    return out


def test_buckets_and_unpacked_layout():
    assert length_buckets(2048) == (64, 128, 256, 512, 1024, 2048)
    assert length_buckets(320) == (64, 128, 256, 320)
    # the loss window (the output head's rows) also takes 1.5x powers of two: 384 completion tokens in a
    # 512-token row run the head on 384 positions, not 512
    assert window_buckets(512) == (64, 96, 128, 192, 256, 384, 512)
    assert window_buckets(320) == (64, 96, 128, 192, 256, 320)
    rng = np.random.default_rng(0)
    long = Sample(rng.integers(1, 50, 128), rng.integers(1, 50, 384), np.zeros(384), 1.0)
    (mb,), _ = make_microbatches([long], max_len=512, rows_cap=1, max_tokens=512, aggregation="token")
    assert mb["tokens"].shape == (1, 512) and mb["targets"].shape == (1, 384)
    s = Sample(np.array([5, 6, 7]), np.array([8, 9]), np.array([-1.0, -2.0]), 0.5)
    for packing in (False, True):
        mbs, stats = make_microbatches([s], max_len=64, rows_cap=4, max_tokens=1024, aggregation="token",
                                       packing=packing)
        (mb,) = mbs
        assert mb["tokens"].shape == (1, 64) and mb["targets"].shape == (1, 64)
        assert mb["tokens"][0, :6].tolist() == [5, 6, 7, 8, 9, 0]
        assert mb["positions"][0, :5].tolist() == [0, 1, 2, 3, 4]
        assert (mb["segment_ids"][0, :5] > 0).all() and mb["segment_ids"][0, 5] == 0
        # the window starts at the hidden state that predicts the first completion token
        assert mb["window_index"][0, :2].tolist() == [2, 3] and mb["targets"][0, :2].tolist() == [8, 9]
        assert mb["loss_mask"][0, :3].tolist() == [True, True, False]
        assert mb["sampler_logprobs"][0, :2].tolist() == [-1.0, -2.0]
        assert mb["advantages"][0, :2].tolist() == [0.5, 0.5]
        assert mb["token_weights"].sum() == pytest.approx(1.0)
        assert stats["completion_tokens"] == 2
    # too long: the completion is cut at max_len (or at max_completion) and counted
    long = Sample(np.arange(50), np.arange(30), np.zeros(30), 1.0)
    mbs, stats = make_microbatches([long], max_len=64, rows_cap=4, max_tokens=1024, aggregation="sequence",
                                   max_completion=16, packing=False)
    assert stats["cut_completions"] == 1 and mbs[0]["loss_mask"].sum() == 14
    mbs, _ = make_microbatches([long], max_len=128, rows_cap=4, max_tokens=1024, aggregation="token",
                               max_completion=16, packing=False)
    assert mbs[0]["loss_mask"].sum() == 16 and mbs[0]["tokens"].shape == (1, 128)


def test_shared_prompts_are_stored_once_and_rows_are_packed():
    """Twelve turns with one prompt (a debate's round 1) lay the prompt out once; a round-2-like prompt
    that extends it shares its head; an unrelated prompt gets its own group."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(1, 256, 40)
    turns = [Sample(prompt, rng.integers(1, 256, 8), np.zeros(8), 1.0) for _ in range(12)]
    longer = Sample(np.concatenate([prompt, rng.integers(1, 256, 20)]), rng.integers(1, 256, 8), np.zeros(8), -1.0)
    other = Sample(rng.integers(1, 256, 30), rng.integers(1, 256, 8), np.zeros(8), 0.5)
    (mb,), stats = make_microbatches(turns + [longer, other], max_len=256, rows_cap=16, max_tokens=4096,
                                     aggregation="token")
    assert stats["sequence_tokens"] == 12 * 48 + 68 + 38
    assert stats["packed_tokens"] == 40 + 12 * 8 + 28 + 38
    assert mb["tokens"].shape == (1, 256) and mb["loss_mask"].sum() == 14 * 8
    # a target follows its window position in the row, except the first completion token of members
    # that share a whole prompt: all of them are predicted from the prompt's last token
    tokens, idx = mb["tokens"][0], mb["window_index"][0][mb["loss_mask"][0]]
    targets = mb["targets"][0][mb["loss_mask"][0]]
    from_prefix_end = mb["positions"][0][idx] == 39
    assert from_prefix_end.sum() == 12 and len(set(idx[from_prefix_end])) == 1
    assert np.array_equal(targets[~from_prefix_end], tokens[idx[~from_prefix_end] + 1])
    assert sorted(targets[from_prefix_end]) == sorted(t.completion[0] for t in turns)


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_packed_loss_and_gradients_equal_unpacked(aggregation):
    """Packing (shared prefixes, several samples per row) changes the layout, not the maths: the loss
    and every gradient match one-sample-per-row batches within 1e-5 in float32."""
    from jaxdebate.rl.grpo import Learner

    params, config = load("tiny:layers=2,hidden=32,heads=4,kv_heads=2,intermediate=64,vocab=256")
    learner = Learner(config, LossConfig(beta=0.1), OptimizerConfig(peak_lr=1e-2, end_lr=1e-2), 4)
    rng = np.random.default_rng(4)
    samples = []
    for _ in range(3):
        base = rng.integers(0, 256, int(rng.integers(5, 30)))
        for k in range(5):
            prompt = base if k < 3 else np.concatenate([base, rng.integers(0, 256, int(rng.integers(1, 10)))])
            c = int(rng.integers(1, 20))
            samples.append(Sample(prompt, rng.integers(0, 256, c), rng.normal(-5, 1, c), float(rng.normal())))
    kw = dict(max_len=128, rows_cap=16, max_tokens=4096, aggregation=aggregation, max_completion=64)
    unpacked, s0 = make_microbatches(samples, packing=False, **kw)
    packed, s1 = make_microbatches(samples, packing=True, **kw)
    assert s1["packed_tokens"] < 0.6 * s0["packed_tokens"] and s1["padded_tokens"] < s0["padded_tokens"]

    def loss_and_grads(mbs):
        grads, loss = jax.tree.map(np.zeros_like, params), 0.0
        for mb in mbs:
            grads, (sums, _) = learner._accumulate(params, params, grads, mb)
            loss += float(sums["loss"])
        return loss, grads

    l0, g0 = loss_and_grads(unpacked)
    l1, g1 = loss_and_grads(packed)
    assert l1 == pytest.approx(l0, rel=1e-5, abs=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    lp0 = np.concatenate([np.asarray(learner.logprobs(params, mb))[mb["loss_mask"]] for mb in unpacked])
    lp1 = np.concatenate([np.asarray(learner.logprobs(params, mb))[mb["loss_mask"]] for mb in packed])
    np.testing.assert_allclose(np.sort(lp1), np.sort(lp0), atol=1e-5)


def test_shapes_are_bounded_and_compile_count_is_bounded():
    from jaxdebate.rl.grpo import Learner

    params, config = load(TINY)
    learner = Learner(config, LossConfig(beta=0.0), OptimizerConfig(peak_lr=1e-3, end_lr=1e-3), 40)
    state = learner.init_state(params)
    rng = np.random.default_rng(0)
    allowed = possible_shapes(128, rows_cap=2, max_tokens=512)
    seen = set()
    for _ in range(12):
        samples = _samples(rng, int(rng.integers(1, 8)))
        mbs, _ = make_microbatches(samples, max_len=128, rows_cap=2, max_tokens=512, aggregation="token",
                                   max_completion=60)
        seen |= {mb["tokens"].shape + mb["targets"].shape[1:] for mb in mbs}
        for mb in mbs:
            assert float(mb["token_weights"][~mb["loss_mask"]].sum()) == 0.0
        state, _ = learner.update(state, mbs)
    assert seen <= allowed
    assert learner._accumulate._cache_size() == len(seen) <= len(allowed) == 8
    assert learner._apply._cache_size() == 1


def test_many_microbatches_equal_one():
    """Token weights normalise over the whole step, so the split does not change the update."""
    from jaxdebate.rl.grpo import Learner

    params, config = load(TINY)
    learner = Learner(config, LossConfig(beta=0.1), OptimizerConfig(peak_lr=1e-2, end_lr=1e-2, grad_clip=0.0), 4)
    samples = _samples(np.random.default_rng(1), 7)
    for aggregation in ("token", "sequence"):
        kw = dict(max_len=128, aggregation=aggregation, max_completion=60)
        one, _ = make_microbatches(samples, rows_cap=8, max_tokens=4096, **kw)
        many, _ = make_microbatches(samples, rows_cap=2, max_tokens=128, **kw)
        assert len(one) < len(many)
        _assert_same_update(learner, params, one, many)


def _assert_same_update(learner, params, mbs_a, mbs_b):
    """One optimiser update from ``params`` on either layout: the same loss, gradient norm and weights."""
    s1, m1 = learner.update(learner.init_state(jax.tree.map(np.array, params)), mbs_a)
    s2, m2 = learner.update(learner.init_state(jax.tree.map(np.array, params)), mbs_b)
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-5, abs=1e-7)
    assert m1["grad_norm"] == pytest.approx(m2["grad_norm"], rel=1e-4)
    for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params)):
        # Adam normalises the first step (~lr * sign(g)): allow 1% of lr for near-zero gradients
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


def test_short_rows_apart_compute_fewer_positions_for_the_same_update():
    """split_short_rows: a packed step that spills a little past one row (the 571-token step of
    bench/README "step") computes 512 + 64 positions, not 2 x 512, in shapes the configuration already
    allows, and the update equals the one-micro-batch layout's."""
    from jaxdebate.rl.grpo import Learner

    params, config = load(TINY)
    learner = Learner(config, LossConfig(beta=0.1), OptimizerConfig(peak_lr=1e-2, end_lr=1e-2, grad_clip=0.0), 4)
    rng = np.random.default_rng(7)
    head = rng.integers(0, 256, 100)
    # six turns sharing a 100-token prompt fill one 512 row; a seventh prompt spills ~60 tokens over
    samples = [Sample(head, rng.integers(0, 256, 68), rng.normal(-5, 1, 68), float(rng.normal())) for _ in range(6)]
    samples.append(Sample(rng.integers(0, 256, 30), rng.integers(0, 256, 29), rng.normal(-5, 1, 29), 0.7))
    kw = dict(max_len=512, rows_cap=8, max_tokens=4096, aggregation="token", max_completion=128)
    together, s0 = make_microbatches(samples, **kw)
    apart, s1 = make_microbatches(samples, split_short_rows=True, **kw)
    assert [mb["tokens"].shape for mb in together] == [(2, 512)] and s0["padded_tokens"] == 1024
    assert [mb["tokens"].shape for mb in apart] == [(1, 512), (1, 64)] and s1["padded_tokens"] == 576
    assert s1["packed_tokens"] == s0["packed_tokens"] == 100 + 6 * 68 + 59
    allowed = possible_shapes(512, rows_cap=8, max_tokens=4096)
    assert {mb["tokens"].shape + mb["targets"].shape[1:] for mb in apart} <= allowed
    # rows of one bucket stay together: nothing changes for a uniform batch
    uniform = [Sample(rng.integers(0, 256, 200), rng.integers(0, 256, 60), rng.normal(-5, 1, 60), 1.0) for _ in range(4)]
    assert [mb["tokens"].shape for mb in make_microbatches(uniform, split_short_rows=True, **kw)[0]] == [(4, 512)]
    _assert_same_update(learner, params, together, apart)


def test_window_logprobs_equal_full_sequence_logprobs():
    """The learner's completion-window log-probs are the model's token_logprobs at those positions."""
    from jaxdebate.model import token_logprobs
    from jaxdebate.rl.grpo import Learner

    params, config = load(TINY)
    learner = Learner(config, LossConfig(), OptimizerConfig(), 4, temperature=0.7)
    samples = _samples(np.random.default_rng(2), 5)
    (mb,), _ = make_microbatches(samples, max_len=128, rows_cap=8, max_tokens=4096, aggregation="token",
                                 max_completion=64, packing=False)
    window = np.asarray(learner.logprobs(params, mb))
    full = np.asarray(token_logprobs(params, config, mb["tokens"], mb["segment_ids"] > 0, temperature=0.7))
    for i in range(len(samples)):
        p, c = mb["window_index"][i, 0] + 1, int(mb["loss_mask"][i].sum())
        np.testing.assert_allclose(window[i, :c], full[i, p:p + c], rtol=1e-5, atol=1e-5)
        assert np.all(window[i, c:] == 0)
