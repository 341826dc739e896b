"""Debate protocol with a scripted sampler: arrays, batching, votes, ties, early stop, remap, trimming."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxdebate.data import Item
from jaxdebate.debate import (
    DebateConfig,
    DebateEnv,
    Grader,
    PromptTooLongError,
    plurality,
    plurality_votes,
    register_env,
    run_debates,
)
from jaxdebate.debate.fitting import water_level
from jaxdebate.errors import ConfigError, DataError, SamplerError
from jaxdebate.sampling.base import SamplingParams
from scripted_sampler import ScriptedSampler

SEED = 11
SAMPLING = SamplingParams(temperature=0.8, max_tokens=64)
ITEMS = [Item("q/0", "Compute $2 + 3$.", "5", "math_debate"), Item("q/1", "Compute $1/2$.", "\\frac{1}{2}", "math_debate")]


@pytest.fixture(scope="module")
def grader():
    with Grader(timeout_s=10.0) as g:
        yield g


def play(tokenizer, grader, respond, *, items=ITEMS, G=2, config=DebateConfig(), remap=None, sampling=SAMPLING,
         seed=SEED, agents_per_item=None):
    A = max(config.num_agents, 1)
    sampler = ScriptedSampler(tokenizer, respond, seed=seed, shape=(len(items), G, A, config.num_rounds),
                              agents_per_item=agents_per_item)
    batch = run_debates(sampler, tokenizer, items, config=config, n_rollouts=G, sampling=sampling,
                        grader=grader, env_name_remap=remap, seed=seed)
    return batch, sampler


def boxed(x):
    return f"I work it out step by step. The answer is $\\boxed{{{x}}}$."


def test_arrays_turns_and_one_sampler_call_per_round(tokenizer, grader):
    answers = {0: ["5", "6", "5"], 1: ["0.5", "\\dfrac{1}{2}", "1/3"]}  # per item, per agent (round 1)

    def respond(b, g, a, r, prompt):
        if r == 0:
            return boxed(answers[b][a]) if g == 0 else boxed("7")
        return boxed(ITEMS[b].answer)  # everyone converges in round 2

    batch, sampler = play(tokenizer, grader, respond)
    B, G, A, R = batch.shape
    assert (B, G, A, R) == (2, 2, 3, 2)
    assert batch.correct.dtype == np.float32 and batch.votes.dtype == np.int32
    assert batch.gold.dtype == np.int32 and batch.active.dtype == bool and batch.gold.shape == (2,)
    assert batch.active.all()

    # one generate call per round; round 1 = one prompt per item with n = G*A
    assert len(sampler.calls) == 2
    first, second = sampler.calls
    assert len(first.prompts) == 2 and [p.n for p in first.params] == [6, 6]
    assert len(second.prompts) == B * G * A and {p.n for p in second.params} == {1}
    seeds = [p.seed for c in sampler.calls for p in c.params]
    assert len(set(seeds)) == len(seeds)
    assert all(p.temperature == 0.8 and p.max_tokens == 64 for c in sampler.calls for p in c.params)

    # item 0: 5 / 6 / 5 in rollout 0, 7s in rollout 1, all 5 in round 2
    assert batch.correct[0, 0, :, 0].tolist() == [1, 0, 1] and batch.correct[0, 1, :, 0].tolist() == [0, 0, 0]
    assert batch.correct[:, :, :, 1].all()
    gold0 = batch.gold[0]
    assert batch.votes[0, 0, :, 0].tolist() == [gold0, batch.votes[0, 0, 1, 0], gold0]
    assert len({batch.votes[0, 0, 1, 0], batch.votes[0, 1, 0, 0], gold0}) == 3  # 6, 7, 5: three classes
    # item 1: 0.5 and \dfrac{1}{2} are one class (the gold one), 1/3 another
    assert batch.votes[1, 0, 0, 0] == batch.votes[1, 0, 1, 0] == batch.gold[1]
    assert batch.votes[1, 0, 2, 0] not in (batch.gold[1], -1)
    assert batch.classes[1][batch.gold[1]] == "0.5"

    # turns: every played turn, with its index, prompt, tokens, log-probs, version
    assert len(batch.turns) == B * G * A * R
    assert [t.index for t in batch.turns] == sorted(t.index for t in batch.turns)
    t = next(t for t in batch.turns if t.index == (1, 0, 2, 0))
    assert t.answer == "1/3" and t.item_id == "q/1" and t.weight_version == 7 and not t.truncated
    assert list(t.prompt_ids) == first.prompts[1] and len(t.logprobs) == len(t.completion_ids) > 0
    assert tokenizer.decode(t.completion_ids) == t.text
    later = next(t for t in batch.turns if t.index == (0, 0, 1, 1))
    text = tokenizer.decode(later.prompt_ids, skip_special_tokens=False)
    assert "Agent 1's solution" in text and "Agent 3's solution" in text and "Agent 2's solution" not in text
    assert "\\boxed{5}" in text and "\\boxed{6}" in text  # own and others' previous answers
    assert text.count("Compute $2 + 3$.") == 1
    assert batch.stats["sampler_calls"] == 2 and batch.stats["turns"] == 24
    assert batch.stats["grading_timeouts"] == 0 and batch.stats["no_answer"] == 0

    summary = batch.summary()
    assert summary["accuracy_round_1"] == 1.0 and summary["debate_accuracy"] == 1.0
    assert summary["first_round_majority_accuracy"] == 0.5  # rollout 0 of both items
    transcript = batch.transcript(0, 0)
    assert "plurality class" in transcript and "CORRECT" in transcript and "agent 3" in transcript


def test_plurality_tie_rule():
    assert plurality([2, 1, 1]) == 1
    assert plurality([2, 1, -1]) == 2  # tie: the answer of the lowest-index agent
    assert plurality([-1, 1, 2]) == 1
    assert plurality([3, 4, 4, 3]) == 3
    assert plurality([-1, -1]) == -1
    votes = np.array([[[0, 5], [1, 1], [1, 0]]])  # [G=1, A=3, R=2]
    active = np.array([[[True, True], [True, False], [True, True]]])
    assert plurality_votes(votes, active).tolist() == [[1, 5]]  # agent 1's round-2 vote is ignored


def test_votes_ties_and_no_answers_in_a_batch(tokenizer, grader):
    script = {  # rollout g -> last-round answers of agents 0..2 (None: states no answer)
        0: ["5", "6", "6"],       # plurality 6: wrong
        1: ["5", "6", None],      # tie 5/6: agent 0's 5 wins: right
        2: [None, "6", "5"],      # tie: agent 1's 6 wins: wrong
        3: [None, None, None],    # no votes: wrong
    }

    def respond(b, g, a, r, prompt):
        if r == 0:
            return boxed("9")
        answer = script[g][a]
        return "I am not sure." if answer is None else boxed(answer)

    batch, _ = play(tokenizer, grader, respond, items=ITEMS[:1], G=4)
    assert batch.debate_correct()[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert batch.votes[0, 3, :, 1].tolist() == [-1, -1, -1]
    assert batch.correct[0, 3, :, 1].tolist() == [0, 0, 0]
    assert batch.stats["no_answer"] == 5
    nobody = play(tokenizer, grader, lambda *k: boxed("4"), items=ITEMS[:1])[0]
    assert nobody.gold[0] == -1 and not nobody.correct.any() and (nobody.votes == 0).all()


def test_early_stop_on_consensus(tokenizer, grader):
    config = DebateConfig(num_rounds=3, early_stop_on_consensus=True)

    def respond(b, g, a, r, prompt):
        if g == 0:  # agree from round 1 (equivalent spellings count as agreement)
            return boxed(["5", "5.0", "\\frac{10}{2}"][a])
        if g == 1:  # agree from round 2
            return boxed("5" if r >= 1 else str(a))
        return boxed(str(a + r))  # never agree

    batch, sampler = play(tokenizer, grader, respond, items=ITEMS[:1], G=3, config=config)
    assert batch.active[0, 0].tolist() == [[True, False, False]] * 3
    assert batch.active[0, 1].tolist() == [[True, True, False]] * 3
    assert batch.active[0, 2].all()
    assert batch.stats["early_stops"] == 2
    assert [len(c.prompts) for c in sampler.calls] == [1, 6, 3]  # stopped rollouts are not sampled
    assert batch.last_rounds()[0].tolist() == [0, 1, 2]
    assert batch.debate_correct()[0].tolist() == [1.0, 1.0, 0.0]
    assert len(batch.turns) == 3 + 6 + 9
    assert (batch.votes[~batch.active] == -1).all() and not batch.correct[~batch.active].any()

    no_stop, _ = play(tokenizer, grader, respond, items=ITEMS[:1], G=3,
                      config=dataclasses.replace(config, early_stop_on_consensus=False))
    assert no_stop.active.all() and no_stop.stats["early_stops"] == 0


def test_env_name_remap_routes_items(tokenizer, grader):
    items = [Item("m/0", "Compute $2 + 3$.", "5", "math"), Item("d/0", "Compute $1/2$.", "0.5", "math_debate")]

    def respond(b, g, a, r, prompt):
        return boxed(items[b].answer)

    plain, sampler = play(tokenizer, grader, respond, items=items, agents_per_item=[1, 3])
    assert plain.env_names == ("math", "math_debate") and plain.shape == (2, 2, 3, 2)
    assert plain.active[0, :, 0, 0].all() and plain.active[0].sum() == 2  # one agent, one round, padded
    assert plain.active[1].all()
    assert sampler.calls[0].params[0].n == 2 and sampler.calls[0].params[1].n == 6
    assert len(sampler.calls[1].prompts) == 6  # only the debate item plays round 2
    assert not plain.correct[0, :, 1:].any() and (plain.votes[0, :, 1:] == -1).all()

    remapped, _ = play(tokenizer, grader, respond, items=items, remap={"math": "math_debate"})
    assert remapped.env_names == ("math_debate", "math_debate") and remapped.active.all()

    sampler = ScriptedSampler(tokenizer, respond, seed=SEED, shape=(2, 2, 3, 2))
    with pytest.raises(DataError, match="item 'm/0' \\(env 'math' remapped\\): environment 'chess' is not registered"):
        run_debates(sampler, tokenizer, items, config=DebateConfig(), n_rollouts=2, sampling=SAMPLING,
                    grader=grader, env_name_remap={"math": "chess"}, seed=SEED)
    assert sampler.calls == []  # nothing sampled


def test_registered_env_with_its_own_shape(tokenizer, grader):
    @register_env("test_two_agents_three_rounds")
    def _factory(config):
        return DebateEnv("test_two_agents_three_rounds", 2, 3, config)

    items = [Item("x/0", "Compute $2 + 3$.", "5", "test_two_agents_three_rounds")]
    batch, _ = play(tokenizer, grader, lambda *k: boxed("5"), items=items,
                    config=DebateConfig(num_rounds=3), agents_per_item=[2])
    assert batch.shape == (1, 2, 3, 3)
    assert batch.active[0, :, :2].all() and not batch.active[0, :, 2].any()
    with pytest.raises(ConfigError, match="already registered"):
        register_env("test_two_agents_three_rounds")(lambda c: DebateEnv("x", 1, 1, c))


def test_long_previous_answers_are_trimmed_visibly(tokenizer, grader):
    config = DebateConfig(max_sequence_length=400)
    sampling = SamplingParams(temperature=1.0, max_tokens=150)
    filler = "Let me think about this carefully once more. " * 12  # ~120 tokens

    def respond(b, g, a, r, prompt):
        return f"Agent {a} reasoning. {filler} So the final answer is \\boxed{{{5 + a}}}."

    batch, sampler = play(tokenizer, grader, respond, items=ITEMS[:1], G=1, config=config, sampling=sampling)
    budget = config.max_sequence_length - sampling.max_tokens
    for prompt in sampler.calls[1].prompts:
        assert len(prompt) <= budget
    later = [t for t in batch.turns if t.index[3] == 1]
    assert all(t.trimmed == 3 for t in later)  # own previous answer + two others
    text = tokenizer.decode(later[0].prompt_ids, skip_special_tokens=False)
    assert text.count("tokens trimmed …]") == 3
    for a in range(3):  # the tail with the final answer survives
        assert f"\\boxed{{{5 + a}}}" in text
    assert batch.stats["trimmed_prompts"] == 3 and batch.stats["trimmed_answers"] == 9

    roomy, sampler = play(tokenizer, grader, respond, items=ITEMS[:1], G=1, config=DebateConfig(), sampling=sampling)
    assert roomy.stats["trimmed_prompts"] == 0
    assert "trimmed" not in tokenizer.decode(sampler.calls[1].prompts[0])


def test_prompt_that_cannot_fit_is_an_error_before_sampling(tokenizer, grader):
    long_item = [Item("long/0", "Compute this: " + "1 + " * 300 + "1.", "301", "math_debate")]
    sampler = ScriptedSampler(tokenizer, lambda *k: boxed(1), seed=SEED, shape=(1, 1, 3, 2))
    with pytest.raises(PromptTooLongError, match="item 'long/0': the round-1 prompt has \\d+ tokens"):
        run_debates(sampler, tokenizer, long_item, config=DebateConfig(max_sequence_length=300), n_rollouts=1,
                    sampling=SAMPLING, grader=grader, seed=SEED)
    assert sampler.calls == []


def test_seeds_make_batches_reproducible(tokenizer, grader):
    def respond(b, g, a, r, prompt):
        return boxed(b + g + a + r)

    one, s1 = play(tokenizer, grader, respond, seed=3)
    two, s2 = play(tokenizer, grader, respond, seed=3)
    assert [p.seed for c in s1.calls for p in c.params] == [p.seed for c in s2.calls for p in c.params]
    assert one.turns == two.turns and (one.votes == two.votes).all()
    _, s3 = play(tokenizer, grader, respond, seed=4)
    assert {p.seed for c in s3.calls for p in c.params}.isdisjoint(p.seed for c in s1.calls for p in c.params)


def test_truncated_completions_are_flagged(tokenizer, grader):
    long = "word " * 200 + "\\boxed{5}"
    batch, _ = play(tokenizer, grader, lambda *k: long, items=ITEMS[:1], G=1,
                    sampling=SamplingParams(max_tokens=20))
    assert all(t.truncated and t.answer is None for t in batch.turns)
    assert batch.stats["truncated"] == 6 and not batch.correct.any()
    assert batch.truncated()[0, 0].all() and batch.truncated().shape == batch.active.shape


class _ShortSampler(ScriptedSampler):
    def generate(self, prompts, params):
        return super().generate(prompts, params)[:-1]


def test_misbehaving_sampler_and_bad_arguments(tokenizer, grader):
    sampler = _ShortSampler(tokenizer, lambda *k: boxed(5), seed=SEED, shape=(2, 1, 3, 2))
    with pytest.raises(SamplerError, match="returned 1 results for 2 prompts"):
        run_debates(sampler, tokenizer, ITEMS, config=DebateConfig(), n_rollouts=1, sampling=SAMPLING,
                    grader=grader, seed=SEED)
    with pytest.raises(ConfigError, match="n_rollouts"):
        run_debates(sampler, tokenizer, ITEMS, config=DebateConfig(), n_rollouts=0, sampling=SAMPLING,
                    grader=grader, seed=SEED)
    with pytest.raises(ConfigError, match="leaves no room"):
        run_debates(sampler, tokenizer, ITEMS, config=DebateConfig(max_sequence_length=64), n_rollouts=1,
                    sampling=SamplingParams(max_tokens=64), grader=grader, seed=SEED)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_agents": 0}, r"debate\.num_agents"),
        ({"num_rounds": 1.5}, r"debate\.num_rounds"),
        ({"max_sequence_length": 8}, r"debate\.max_sequence_length"),
        ({"early_stop_on_consensus": "yes"}, r"debate\.early_stop_on_consensus"),
        ({"instruction": " "}, r"debate\.instruction"),
        ({"trim_marker": "[{m} cut]"}, r"debate\.trim_marker"),
        ({"example_problem": "Compute $1 + 1$."}, r"debate\.example_solution must be set together"),
        ({"example_problem": "", "example_solution": "2"}, r"debate\.example_problem"),
        ({"extraction": "fuzzy"}, r"debate\.extraction must be one of marked, number"),
    ],
)
def test_debate_config_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DebateConfig(**kwargs)
    assert dataclasses.asdict(DebateConfig())["num_agents"] == 3


def test_water_level():
    assert water_level([100, 50, 10], 0) == 100
    assert water_level([100, 50, 10], 40) == 60
    assert water_level([100, 50, 10], 60) == 45  # 55 + 5
    assert water_level([100, 50, 10], 500) == 0


def test_answer_line_protocol_prompts_and_extraction(tokenizer, grader):
    """The worked example precedes every turn, round 2 quotes the others under the protocol's
    wording, and unmarked numeric answers ("2 + 3 = 5") are graded under ``extraction='number'``."""
    from jaxdebate.debate.answer_protocols import PROTOCOLS, with_protocol

    config = with_protocol(DebateConfig(num_agents=2, num_rounds=2), "answer_line")
    assert config.extraction == "number" and config.example_solution == PROTOCOLS["answer_line"]["example_solution"]
    assert with_protocol(config, "boxed") == DebateConfig(num_agents=2, num_rounds=2)
    with pytest.raises(ConfigError, match="unknown answer protocol 'nope'"):
        with_protocol(config, "nope")
    seen = {}

    def respond(b, g, a, r, prompt):
        seen[(b, a, r)] = prompt
        return "2 + 3 = 5" if a == 0 else "2 + 3 = 6\nAnswer: 6"

    items = ITEMS[:1]
    batch, _ = play(tokenizer, grader, respond, items=items, G=1, config=config)
    first, second = seen[(0, 0, 0)], seen[(0, 1, 1)]
    example = "Compute $3 + 4$.\n\nGive the result on the last line as: Answer: <number>"
    assert first.index(example) < first.index("3 + 4 = 7\nAnswer: 7") < first.index("Compute $2 + 3$.")
    assert second.startswith(first[:first.index("Compute $2 + 3$.")])  # same system + example prefix
    assert "Other agents answered the same problem:" in second and "2 + 3 = 5" in second
    assert batch.correct[0, 0, :, 0].tolist() == [1.0, 0.0]
    assert [t.answer for t in batch.turns if t.index[3] == 0] == ["5", "6"]
    boxed_batch, _ = play(tokenizer, grader, respond, items=items, G=1, config=DebateConfig(num_agents=2, num_rounds=2))
    assert boxed_batch.correct[0, 0, :, 0].tolist() == [0.0, 0.0]  # "marked" finds no answer in "2 + 3 = 5"


def test_answer_line_debate_quotes_final_answers_only(tokenizer, grader):
    """``answer_line_debate``: round 1 is ``answer_line``'s; a later round shows the problem with one
    line per previous final answer (the agent's own first, ``no answer`` where none was stated), never
    the other agents' text, after a worked example in the same layout."""
    from jaxdebate.debate.answer_protocols import with_protocol

    seen = {}

    def respond(b, g, a, r, prompt):
        seen[(a, r)] = prompt
        return ["2 + 3 = 5", "Let me ramble first.\n2 + 3 = 6\nAnswer: 6", "I am not sure at all."][a]

    plain = with_protocol(DebateConfig(num_agents=3, num_rounds=2), "answer_line")
    play(tokenizer, grader, respond, items=ITEMS[:1], G=1, config=plain)
    first_plain = seen[(0, 0)]
    config = with_protocol(plain, "answer_line_debate")
    assert config.quote == "answer" and with_protocol(config, "answer_line") == plain
    batch, _ = play(tokenizer, grader, respond, items=ITEMS[:1], G=1, config=config)
    assert seen[(0, 0)] == first_plain
    for a, lines in ((0, "You: 5\nAgent 2: 6\nAgent 3: no answer"), (2, "You: no answer\nAgent 1: 5\nAgent 2: 6")):
        prompt = seen[(a, 1)]
        example = f"Compute $3 + 4$.\n\nAnswers so far:\nYou: 7\nAgent 2: 8\nAgent 3: 7\n\n{config.debate_instruction}"
        problem = f"Compute $2 + 3$.\n\nAnswers so far:\n{lines}\n\n{config.debate_instruction}"
        reply = prompt.index("3 + 4 = 7\nAnswer: 7", prompt.index(example) + len(example))
        assert prompt.index(example) < reply < prompt.index(problem), prompt
        assert "ramble" not in prompt and "not sure" not in prompt and prompt.count("Compute $3 + 4$.") == 1
    assert batch.stats["trimmed_prompts"] == 0 and batch.correct[0, 0, :, 1].tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"quote": "summary"}, r"debate\.quote must be one of full, answer"),
        ({"debate_example_answers": ("7",)}, r"debate\.debate_example_answers needs quote='answer'"),
        ({"quote": "answer", "debate_example_answers": ("7",)}, r"debate_example_answers needs example_problem"),
        ({"quote": "answer", "debate_example_answers": (), "example_problem": "Compute $1 + 1$.",
          "example_solution": "2"}, r"debate_example_answers must be a non-empty list"),
    ],
)
def test_quote_settings_are_validated(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DebateConfig(**kwargs)


# -- issue 12 item 2: no round barrier across the batch with a streaming sampler


def test_a_streaming_sampler_plays_each_rollout_at_its_own_pace(tokenizer, grader):
    """Item 0's round-1 answers are slow; item 1's rollouts play all three rounds meanwhile. The batch
    equals the round-by-round one (seeds are per request), early stops included."""
    from scripted_sampler import StreamingScriptedSampler

    from jaxdebate.sampling.base import StreamingSampler

    items = [Item(f"q/{i}", f"Compute ${i} + {i}$.", str(2 * i), "math_debate") for i in range(3)]
    config = DebateConfig(num_rounds=3, early_stop_on_consensus=True)
    G, A, R = 2, 3, 3

    def respond(b, g, a, r, prompt):
        if g == 1 and b == 2:  # consensus in round 1: this rollout stops early
            return boxed(2 * b)
        return boxed(2 * b + (a + r) % 2)

    def delay(b, g, a, r):
        return 0.8 if (b, r) == (0, 0) else 0.01

    wave = ScriptedSampler(tokenizer, respond, seed=SEED, shape=(3, G, A, R))
    stream = StreamingScriptedSampler(tokenizer, respond, seed=SEED, shape=(3, G, A, R), delay=delay)
    assert isinstance(stream, StreamingSampler) and not isinstance(wave, StreamingSampler)
    kwargs = dict(config=config, n_rollouts=G, sampling=SAMPLING, grader=grader, seed=SEED)
    try:
        expected = run_debates(wave, tokenizer, items, **kwargs)
        got = run_debates(stream, tokenizer, items, **kwargs)
    finally:
        stream.close()

    for name in ("correct", "votes", "gold", "active"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    assert got.turns == expected.turns
    assert got.stats["early_stops"] == expected.stats["early_stops"] == 1
    assert not got.active[2, 1, :, 1:].any() and got.active[1].all()
    slow_done = next(t for kind, key, t in stream.events if kind == "done" and key == (0, 0, 0, 0))
    item1_last_round = [t for kind, key, t in stream.events if kind == "submit" and key[0] == 1 and key[3] == 2]
    assert len(item1_last_round) == G * A and max(item1_last_round) < slow_done  # no barrier
    assert got.stats["sampler_calls"] == 3 + (3 * G - 1) * A * (R - 1)  # one per request
    assert expected.stats["sampler_calls"] == R and 1 <= got.stats["mean_in_flight"] <= 3 * G * A
