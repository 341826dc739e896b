"""The in-process JAX sampler: greedy == uncached argmax == transformers, log-probs, padding, seeds,
finish reasons, sampling distribution, recompilation, weight updates, bad input, SmolLM2 chat."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.model import export_hf, load, logits, token_logprobs
from jaxdebate.sampling import Completion, JaxSampler, Sampler, SamplingParams
from jaxdebate.sampling.decoding import sample

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
SOURCE = "tiny:std=0.1,tie=false"  # the model of conftest.py's fixtures (another seed of it below)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode("The capital of France is"), tokenizer.encode("1, 2, 3,"),
            tokenizer.encode("Once upon a time, in a land far away, there lived")]


def _uncached_greedy(params, config, prompt, steps, width=64):
    """Greedy decoding by re-running the full causal forward for every token (no KV cache); the
    sequence sits at the start of a fixed-width buffer so one compiled shape serves every step."""
    seq = np.zeros((1, width), np.int32)
    seq[0, :len(prompt)] = prompt
    for k in range(len(prompt), len(prompt) + steps):
        seq[0, k] = int(np.asarray(logits(params, config, seq))[0, k - 1].argmax())
    return seq[0, len(prompt):len(prompt) + steps].tolist()


def test_greedy_equals_uncached_argmax_and_transformers(model, sampler, prompts, tmp, tokenizer):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    params, config = model
    out = sampler.generate(prompts, GREEDY)
    assert isinstance(sampler, Sampler)
    hf = transformers.AutoModelForCausalLM.from_pretrained(export_hf(params, config, tmp / "hf"),
                                                           dtype=torch.float32).eval()
    for prompt, (completion,) in zip(prompts, out):
        assert isinstance(completion, Completion) and completion.finish_reason == "length"
        assert len(completion.token_ids) == 12 and len(set(completion.token_ids)) > 3
        assert list(completion.token_ids) == _uncached_greedy(params, config, prompt, 12)
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              max_new_tokens=12, do_sample=False, eos_token_id=list(tokenizer.stop_ids),
                              pad_token_id=tokenizer.pad_id)
        assert ref[0, len(prompt):].tolist() == list(completion.token_ids)
        assert completion.text == tokenizer.decode(completion.token_ids)


def test_left_padded_batch_equals_each_prompt_alone(sampler, prompts):
    together = sampler.generate(prompts, GREEDY)
    for prompt, (completion,) in zip(prompts, together):
        (alone,) = sampler.generate([prompt], GREEDY)[0]
        assert alone.token_ids == completion.token_ids
        np.testing.assert_allclose(alone.logprobs, completion.logprobs, atol=1e-5)


def test_shared_prefixes_are_prefilled_once_with_the_same_results(model, sampler, tokenizer):
    """Prompts that start alike (two worked examples, a debate's question) prefill each common prefix
    once per batch; greedy tokens and log-probs equal the full uncached forward, in a batch with two
    prefix groups and an unrelated prompt as well as alone."""
    from jaxdebate.shapes import group_prefixes

    params, config = model
    heads = [tokenizer.encode("Solve the problem. Example: Compute 2 + 3. Answer: 5. Now the problem follows:"),
             tokenizer.encode("Read the story and answer. Example: Tom has 3 apples and eats one. Answer: 2.")]
    prompts = [h + tokenizer.encode(q) for h in heads for q in (" Compute 7 + 8.", " Compute 12 - 4.")]
    prompts.append(tokenizer.encode("An unrelated prompt"))
    groups = group_prefixes(prompts, [len(p) - 1 for p in prompts], [len(p) for p in prompts], min_prefix=16)
    assert sorted((len(m), p >= len(heads[0]) - 1) for p, m in groups) == [(1, False), (2, True), (2, True)]
    together = sampler.generate(prompts, GREEDY)
    for prompt, (completion,) in zip(prompts, together):
        assert list(completion.token_ids) == _uncached_greedy(params, config, prompt, 12, width=96)
        seq = np.asarray([list(prompt) + list(completion.token_ids)])
        lp = token_logprobs(params, config, seq, np.ones_like(seq, bool))
        np.testing.assert_allclose(completion.logprobs, np.asarray(lp)[0, len(prompt):], atol=2e-5)
        (alone,) = sampler.generate([prompt], GREEDY)[0]
        assert alone.token_ids == completion.token_ids


@pytest.mark.parametrize("sp", [SamplingParams(temperature=0.0, max_tokens=10),
                                SamplingParams(temperature=0.7, top_p=0.9, max_tokens=10, n=2, seed=3)],
                         ids=["greedy", "t0.7-top_p0.9"])
def test_logprobs_equal_log_softmax_of_model_logits(model, sampler, prompts, sp):
    params, config = model
    out = sampler.generate(prompts[:2], sp)
    for prompt, completions in zip(prompts[:2], out):
        for c in completions:
            seq = np.asarray([list(prompt) + list(c.token_ids)])
            lp = token_logprobs(params, config, seq, np.ones_like(seq, bool), temperature=sp.temperature or 1.0)
            np.testing.assert_allclose(c.logprobs, np.asarray(lp)[0, len(prompt):], atol=2e-5)


def test_same_seed_same_samples(sampler, prompts):
    sp = SamplingParams(temperature=1.0, max_tokens=8, n=3, seed=11)
    first = sampler.generate(prompts, sp)
    again = sampler.generate(prompts, sp)
    other = sampler.generate(prompts, dataclasses.replace(sp, seed=12))
    assert [[c.token_ids for c in cs] for cs in first] == [[c.token_ids for c in cs] for cs in again]
    assert [[c.token_ids for c in cs] for cs in first] != [[c.token_ids for c in cs] for cs in other]
    assert len({c.token_ids for c in first[0]}) == 3  # the n samples differ
    assert first[0][0].token_ids != first[1][0].token_ids
    # per-prompt params: one greedy prompt and one sampled prompt in the same call
    mixed = sampler.generate(prompts[:2], [SamplingParams(temperature=0.0, max_tokens=12), sp])
    assert mixed[0][0].token_ids == sampler.generate(prompts[:1], GREEDY)[0][0].token_ids
    assert [c.token_ids for c in mixed[1]] == [c.token_ids for c in first[1]]


def test_stop_strings_stop_ids_and_max_tokens(model, tokenizer, sampler, prompts):
    params, config = model
    (full,) = sampler.generate(prompts[:1], GREEDY)[0]
    assert full.finish_reason == "length" and full.truncated
    (short,) = sampler.generate(prompts[:1], dataclasses.replace(GREEDY, max_tokens=3))[0]
    assert short.token_ids == full.token_ids[:3] and short.finish_reason == "length"

    # a stop string: the text of the 5th token; the completion ends at the token that completes it
    stop = tokenizer.decode(full.token_ids[4:5]).strip()
    assert stop and stop not in tokenizer.decode(full.token_ids[:4])
    (cut,) = sampler.generate(prompts[:1], dataclasses.replace(GREEDY, stop=(stop,)))[0]
    assert cut.finish_reason == "stop" and cut.token_ids == full.token_ids[:5]
    assert cut.text == tokenizer.decode(full.token_ids[:5]).split(stop)[0]
    assert cut.logprobs == full.logprobs[:5]

    # a stop token: the completion includes it, the text excludes it
    stop_id = full.token_ids[6]
    with JaxSampler(params, config, tokenizer, stop_ids=[stop_id], decode_chunk=4) as custom:
        (ended,) = custom.generate(prompts[:1], GREEDY)[0]
    first = full.token_ids.index(stop_id)
    assert ended.finish_reason == "stop" and ended.token_ids == full.token_ids[:first + 1]
    assert ended.text == tokenizer.decode(full.token_ids[:first])


def test_context_limit_ends_with_length(model, tokenizer, prompts):
    params, config = model
    limit = len(prompts[2]) + 5
    with JaxSampler(params, config, tokenizer, max_total_len=limit) as s:
        out = s.generate(prompts[1:], GREEDY)
        expected = [min(12, limit - len(p)) for p in prompts[1:]]
        assert [len(cs[0].token_ids) for cs in out] == expected and expected[1] == 5
        assert all(cs[0].finish_reason == "length" for cs in out)
        with pytest.raises(SamplerError, match="no room left"):
            s.generate([list(range(limit))], GREEDY)


def test_no_recompilation_across_prompt_lengths(model, tokenizer):
    params, config = model
    with JaxSampler(params, config, tokenizer) as s:
        for length in (3, 7, 12, 16):
            s.generate([list(range(100, 100 + length))], SamplingParams(temperature=1.0, max_tokens=5 + length // 2))
        assert s.compile_counts() == {"prefill": 1, "decode": 1}
        s.generate([list(range(100, 117))], SamplingParams(temperature=1.0, max_tokens=4))  # next bucket
        assert s.compile_counts()["prefill"] == 2
        counts, stats = s.compile_counts(), s.stats()
        assert set(stats) == {"sampler/compiled_prefill_shapes", "sampler/compiled_decode_shapes",
                              "sampler/prefill_seconds", "sampler/decode_seconds"}
        assert stats["sampler/compiled_prefill_shapes"] == 2.0
        assert stats["sampler/compiled_decode_shapes"] == float(counts["decode"])
        # five generate calls: both programs ran, and their seconds only grow
        assert stats["sampler/prefill_seconds"] > 0 and stats["sampler/decode_seconds"] > 0
        s.generate([list(range(100, 105))], SamplingParams(temperature=1.0, max_tokens=4))
        later = s.stats()
        assert later["sampler/prefill_seconds"] > stats["sampler/prefill_seconds"]
        assert later["sampler/decode_seconds"] > stats["sampler/decode_seconds"]


def test_dropping_finished_rows_gives_the_same_samples_for_less_decoding(model, tokenizer):
    """Issue 12: rows of one batch finish at different steps (their max_tokens differ); decoding on
    with only the unfinished rows gives the same tokens and log-probs as decoding them all."""
    params, config = model
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(5, 200, size=int(rng.integers(8, 30)))] for _ in range(12)]
    sp = [SamplingParams(temperature=1.0, max_tokens=int(m), seed=3) for m in [4, 6, 8, 9, 12, 14, 16, 20, 25, 30, 60, 90]]
    out, work = {}, {}
    for shrink in (False, True):
        with JaxSampler(params, config, tokenizer, shrink=shrink, decode_chunk=8, seed=1) as s:
            out[shrink] = s.generate(prompts, sp)
            work[shrink] = s.decoded_row_steps
    for full, shrunk in zip(out[False], out[True]):
        assert full[0].token_ids == shrunk[0].token_ids and full[0].finish_reason == shrunk[0].finish_reason
        np.testing.assert_allclose(full[0].logprobs, shrunk[0].logprobs, atol=1e-5)
    assert [len(c[0].token_ids) for c in out[True]] == [4, 6, 8, 9, 12, 14, 16, 20, 25, 30, 60, 90]
    assert work[True] < 0.5 * work[False], work  # 12 rows to the 90th token vs a shrinking batch


def _chi_square_ok(counts, probs):
    """Pearson chi-square goodness of fit (bins expecting < 5 samples pooled) within 6 sigma."""
    expected = probs * counts.sum()
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    df = keep.sum() - 1
    return stat < df + 6 * np.sqrt(2 * df), (stat, df)


def test_sampling_distribution_temperature_and_top_p():
    """The sampling kernel itself, on many rows: frequencies match softmax(logits / T), top-p keeps
    exactly the nucleus, and the log-prob is that of the untruncated tempered distribution."""
    vocab, rows, temperature = 768, 20000, 0.7
    logits_row = jnp.asarray(np.random.RandomState(0).randn(vocab) * 2.0, jnp.float32)
    batch = jnp.broadcast_to(logits_row, (rows, vocab))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(rows))
    temps = jnp.full(rows, temperature)
    probs = np.asarray(jax.nn.softmax(logits_row / temperature))

    sample_jit = jax.jit(sample, static_argnums=5)
    tokens, lp = sample_jit(batch, keys, jnp.int32(3), temps, jnp.ones(rows), False)
    ok, stats = _chi_square_ok(np.bincount(np.asarray(tokens), minlength=vocab), probs)
    assert ok, stats
    np.testing.assert_allclose(np.asarray(lp), np.log(probs[np.asarray(tokens)]), atol=1e-5)

    top_p = 0.6
    tokens, lp = sample_jit(batch, keys, jnp.int32(3), temps, jnp.full(rows, top_p), True)
    order = np.argsort(-probs)
    nucleus = order[: np.searchsorted(np.cumsum(probs[order]), top_p) + 1]
    tokens = np.asarray(tokens)
    assert set(tokens.tolist()) <= set(nucleus.tolist())
    ok, stats = _chi_square_ok(np.bincount(tokens, minlength=vocab)[nucleus], probs[nucleus] / probs[nucleus].sum())
    assert ok, stats
    np.testing.assert_allclose(np.asarray(lp), np.log(probs[tokens]), atol=1e-5)

    greedy, _ = sample_jit(batch[:4], keys[:4], jnp.int32(0), jnp.zeros(4), jnp.ones(4), False)
    assert (np.asarray(greedy) == int(np.argmax(probs))).all()


def test_update_weights_close_and_bad_input(model, tokenizer, prompts):
    params, config = model
    other, _ = load(SOURCE + ",seed=5")
    with JaxSampler(params, config, tokenizer) as s:
        before = s.generate(prompts[:1], GREEDY)[0][0]
        assert before.weight_version == 0
        s.update_weights(other, 7)
        after = s.generate(prompts[:1], GREEDY)[0][0]
        assert s.weight_version == 7 and after.weight_version == 7
        assert after.token_ids == tuple(_uncached_greedy(other, config, prompts[0], 12))
        assert after.token_ids != before.token_ids
        with pytest.raises(SamplerError, match="prompt 1 is empty"):
            s.generate([prompts[0], []], GREEDY)
        with pytest.raises(SamplerError, match="token id 99999 outside the vocabulary"):
            s.generate([[1, 99999]], GREEDY)
        with pytest.raises(ValueError, match="2 SamplingParams for 1 prompts"):
            s.generate([prompts[0]], [GREEDY, GREEDY])
        assert s.generate([], GREEDY) == []
    with pytest.raises(SamplerError, match="closed"):
        s.generate(prompts[:1], GREEDY)


def test_bfloat16_sampler_samples_the_bf16_model_and_keeps_f32_logprobs(model, tokenizer, prompts):
    """``dtype='bfloat16'``: greedy paths and log-probs are those of the model run in bf16 (weights
    cast once), not of the fp32 model; the sampler's weights are a bf16 copy; a bad dtype is refused."""
    params, config = model
    bf16 = dataclasses.replace(config, dtype="bfloat16")
    cast = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    sp = SamplingParams(temperature=0.8, max_tokens=10, n=2, seed=4)
    with JaxSampler(params, config, tokenizer, dtype="bfloat16") as s:
        assert {leaf.dtype for leaf in jax.tree.leaves(s._params)} == {jnp.dtype(jnp.bfloat16)}
        greedy = s.generate(prompts, GREEDY)
        sampled = s.generate(prompts[:2], sp)
    gaps = []
    for prompt, (c,) in zip(prompts, greedy):
        assert list(c.token_ids) == _uncached_greedy(cast, bf16, prompt, 12)
    for prompt, completions in zip(prompts[:2], sampled):
        for c in completions:
            assert all(isinstance(x, float) and np.isfinite(x) for x in c.logprobs)
            seq = np.asarray([list(prompt) + list(c.token_ids)])
            lp = token_logprobs(cast, bf16, seq, np.ones_like(seq, bool), temperature=sp.temperature)
            np.testing.assert_allclose(c.logprobs, np.asarray(lp)[0, len(prompt):], atol=0.05)
            fp32 = token_logprobs(params, config, seq, np.ones_like(seq, bool), temperature=sp.temperature)
            gaps.append(np.abs(np.asarray(c.logprobs) - np.asarray(fp32)[0, len(prompt):]).max())
    assert max(gaps) > 1e-3  # bf16 really ran: the fp32 sampler agrees with fp32 to 2e-5
    # the fp32 params passed in are left as they were (the sampler casts a copy)
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    with pytest.raises(ConfigError, match="sampler dtype must be one of"):
        JaxSampler(params, config, tokenizer, dtype="float16")
    # the learner's bf16 matmul operands (model.dot_dtype) never reach the sampler: its log-probs are
    # the fp32 model's to fp32 precision (bf16 operands move them by ~1e-2 on this model)
    with JaxSampler(params, dataclasses.replace(config, dot_dtype="bfloat16"), tokenizer) as s:
        assert s.config.dot_dtype == "compute"
        sampled = s.generate(prompts[:2], sp)
    for prompt, completions in zip(prompts[:2], sampled):
        for c in completions:
            seq = np.asarray([list(prompt) + list(c.token_ids)])
            fp32 = token_logprobs(params, config, seq, np.ones_like(seq, bool), temperature=sp.temperature)
            np.testing.assert_allclose(c.logprobs, np.asarray(fp32)[0, len(prompt):], atol=2e-5)
    with JaxSampler(params, dataclasses.replace(config, dot_dtype="bfloat16"), tokenizer, dtype="bfloat16") as s:
        assert (s.config.dtype, s.config.dot_dtype) == ("bfloat16", "compute")  # a bf16 sampler beside such a learner


@pytest.mark.smollm2
def test_smollm2_answers_two_plus_three(smollm2, tokenizer):
    params, config = smollm2
    prompt = tokenizer.encode_chat([{"role": "user", "content": "What is 2+3?"}])
    with JaxSampler(params, config, tokenizer) as s:
        (c,) = s.generate([prompt], SamplingParams(temperature=0.0, max_tokens=48))[0]
    assert "2 + 3 = 5" in c.text, c.text
    assert c.finish_reason == "stop" and c.token_ids[-1] in tokenizer.stop_ids
