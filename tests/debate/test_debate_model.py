"""The debate protocol on a real (tiny, random) Flax Llama through the in-process JAX sampler, and the
``python -m jaxdebate.debate`` shell command."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdebate.data import load_items
from jaxdebate.debate import DebateConfig, Grader, run_debates
from jaxdebate.debate.__main__ import main
from jaxdebate.sampling.base import SamplingParams


@pytest.fixture(scope="module")
def sampler(tiny_model, tokenizer):
    from jaxdebate.sampling import JaxSampler

    params, config = tiny_model
    s = JaxSampler(params, config, tokenizer, max_total_len=512, weight_version=3)
    yield s
    s.close()


def test_tiny_model_debates_two_rounds(sampler, tokenizer):
    items = load_items("arithmetic:n=2", env="math_debate")
    config = DebateConfig(num_agents=2, num_rounds=2, max_sequence_length=512)
    sampling = SamplingParams(temperature=1.0, max_tokens=12)
    with Grader(timeout_s=10.0) as grader:
        batch = run_debates(sampler, tokenizer, items, config=config, n_rollouts=2, sampling=sampling,
                            grader=grader, seed=5)
        again = run_debates(sampler, tokenizer, items, config=config, n_rollouts=2, sampling=sampling,
                            grader=grader, seed=5)
    assert batch.shape == (2, 2, 2, 2) and batch.active.all()
    assert len(batch.turns) == 16 and batch.stats["sampler_calls"] == 2
    for turn in batch.turns:
        assert 1 <= len(turn.completion_ids) <= 12 and len(turn.logprobs) == len(turn.completion_ids)
        assert all(np.isfinite(lp) and lp <= 0 for lp in turn.logprobs)
        assert turn.weight_version == 3
        assert turn.truncated == (len(turn.completion_ids) == 12 and turn.completion_ids[-1] not in tokenizer.stop_ids)
    # round 2 shows each agent the other agent's round-1 completion (and its own)
    for b in range(2):
        for g in range(2):
            for a in range(2):
                later = next(t for t in batch.turns if t.index == (b, g, a, 1))
                other = next(t for t in batch.turns if t.index == (b, g, 1 - a, 0))
                prompt = tokenizer.decode(later.prompt_ids, skip_special_tokens=False)
                assert f"Agent {2 - a}'s solution:" in prompt and items[b].problem in prompt
                if other.text.strip():
                    assert other.text.strip()[:30] in prompt
    # round 1: one prompt per item for all rollouts and agents; different samples per (g, a)
    first = [t for t in batch.turns if t.index[0] == 0 and t.index[3] == 0]
    assert len({t.prompt_ids for t in first}) == 1 and len({t.completion_ids for t in first}) > 1
    # a seeded batch is reproducible with the real sampler
    assert [(t.index, t.completion_ids) for t in again.turns] == [(t.index, t.completion_ids) for t in batch.turns]
    assert (again.votes == batch.votes).all() and (again.correct == batch.correct).all()
    assert (batch.votes[batch.correct > 0] == np.repeat(batch.gold, 8).reshape(2, 2, 2, 2)[batch.correct > 0]).all()


def test_a_greedy_debate_samples_each_distinct_prompt_once(sampler, tokenizer):
    """Greedy agents given the same prompt answer the same: a greedy 3x2 debate samples round 1 once
    per item (its three agents share the prompt) and round 2 once per agent (each sees the others
    under other names): 4 sequences per item, not 6."""
    items = load_items("arithmetic:n=3", env="math_debate")
    config = DebateConfig(num_agents=3, num_rounds=2, max_sequence_length=512)
    with Grader(timeout_s=10.0) as grader:
        batch = run_debates(sampler, tokenizer, items, config=config, n_rollouts=1,
                            sampling=SamplingParams(temperature=0.0, max_tokens=10), grader=grader, seed=1)
        one = run_debates(sampler, tokenizer, items[:1], config=DebateConfig(num_agents=1, num_rounds=1, max_sequence_length=512),
                          n_rollouts=1, sampling=SamplingParams(temperature=0.0, max_tokens=10), grader=grader, seed=1)
    assert batch.active.all() and len(batch.turns) == 18 and batch.stats["sampled_sequences"] == 12
    for b in range(3):
        first = [t for t in batch.turns if t.index[0] == b and t.index[3] == 0]
        assert len({(t.prompt_ids, t.completion_ids) for t in first}) == 1
        assert len({t.prompt_ids for t in batch.turns if t.index[0] == b and t.index[3] == 1}) == 3
    # the shared round-1 answer is the single agent's greedy answer
    assert next(t for t in batch.turns if t.index == (0, 0, 0, 0)).completion_ids == one.turns[0].completion_ids


def test_shell_command_prints_transcripts(capsys):
    code = main(["--model", "tiny", "--data", "arithmetic", "--n", "1", "--agents", "2", "--rounds", "2",
                 "--rollouts", "1", "--max-tokens", "8", "--max-sequence-length", "512", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert "=== item arithmetic/0/0000  env=math_debate  rollout 0" in out
    assert "--- round 1" in out and "--- round 2" in out and "[agent 2]" in out
    assert out.count("plurality class") == 2 and "debate answer:" in out
    assert "debate_accuracy" in out and "sampler_calls                    2" in out
    assert '"votes": [[[[' in out


def test_shell_command_reports_bad_input(capsys):
    assert main(["--data", "no_such_set"]) == 2
    assert "unknown dataset 'no_such_set'" in capsys.readouterr().err
    assert main(["--data", "arithmetic", "--protocol", "loose"]) == 2
    assert "unknown answer protocol 'loose'" in capsys.readouterr().err
