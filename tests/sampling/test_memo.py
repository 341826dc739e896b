"""The greedy memo on the real JAX sampler: a repeated greedy request is decoded once and answered as
the sampler answers it; sampled requests and new weights always reach the sampler."""

from __future__ import annotations

import jax
import pytest

from jaxdebate.sampling import Sampler, SamplingParams, StreamingSampler
from jaxdebate.sampling.memo import GreedyMemo, memoize_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(t) for t in ("Compute 12 + 7.", "Compute 30 - 4.", "Name a colour.")]


def _tokens(results):
    return [[c.token_ids for c in r] for r in results]


def test_repeats_are_decoded_once_and_answered_as_the_sampler_answers(sampler, prompts):
    direct = sampler.generate(prompts, GREEDY)
    memo = memoize_greedy(sampler)
    assert isinstance(memo, GreedyMemo) and isinstance(memo, Sampler) and not isinstance(memo, StreamingSampler)
    rows_before = sampler.decoded_row_steps
    first = memo.generate(prompts[:2] + [prompts[0]], GREEDY)  # a repeat inside one call
    decoded_first = sampler.decoded_row_steps - rows_before
    assert _tokens(first) == _tokens(direct[:2] + [direct[0]])
    assert (memo.misses, memo.hits) == (2, 1)
    # a later call: the known prompts come from memory, only the new one is decoded
    rows_before = sampler.decoded_row_steps
    second = memo.generate(list(reversed(prompts)), GREEDY)
    assert _tokens(second) == _tokens(list(reversed(direct)))
    assert (memo.misses, memo.hits) == (3, 3)
    assert 0 < sampler.decoded_row_steps - rows_before < decoded_first
    # another budget or stop string is another request
    memo.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=4))
    assert memo.misses == 4


def test_sampled_requests_always_reach_the_sampler(sampler, prompts):
    memo = memoize_greedy(sampler)
    sp = [SamplingParams(temperature=1.0, max_tokens=10, seed=s) for s in (1, 2)]
    got = memo.generate([prompts[0], prompts[0]], sp)
    assert _tokens(got) == _tokens(sampler.generate([prompts[0], prompts[0]], sp))
    assert got[0][0].token_ids != got[1][0].token_ids  # two seeds, two draws: nothing was reused
    assert (memo.hits, memo.misses) == (0, 0)


def test_new_weights_forget_what_the_memo_holds(sampler, model, prompts):
    params, _ = model
    memo = memoize_greedy(sampler)
    before = memo.generate(prompts[:1], GREEDY)
    try:
        sampler.update_weights(jax.tree.map(lambda x: x * 1.5, params), 1)
        after = memo.generate(prompts[:1], GREEDY)
        assert memo.misses == 2 and memo.hits == 0
        assert after[0][0].weight_version == 1
        assert _tokens(after) == _tokens(sampler.generate(prompts[:1], GREEDY))
        assert _tokens(after) != _tokens(before)
    finally:
        sampler.update_weights(params, 0)
    memo.close()
    assert memo.generate(prompts[:1], GREEDY) and memo.misses == 3  # closed: nothing remembered
