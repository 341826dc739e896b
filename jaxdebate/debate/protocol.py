"""The debate protocol (DESIGN §3): play a batch of items × G rollouts, round by round.

Round 1 prompts are identical for an item's rollouts and agents, so they are one request with
``n = G × A``; later rounds have one request per (rollout, agent). A streaming sampler (the vLLM
server) gets each request as soon as it is runnable: a rollout's next round starts as soon as its own
agents have answered. Other samplers get one ``generate`` call per round of the whole batch. Each
request gets a seed derived from ``(seed, b, round[, g, a])``, so a batch is reproducible with any
Sampler that honours seeds.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from jaxdebate.data.items import Item
from jaxdebate.debate.answers import extract_answer
from jaxdebate.debate.batch import DebateBatch, Turn
from jaxdebate.debate.classes import answer_classes_many
from jaxdebate.debate.config import DebateConfig
from jaxdebate.debate.envs import envs_for
from jaxdebate.debate.fitting import debate_prompt, first_prompt
from jaxdebate.debate.grading import Grader
from jaxdebate.errors import ConfigError, DataError, SamplerError
from jaxdebate.sampling.base import Completion, Sampler, SamplingParams, StreamingSampler


def derive_seed(seed: int, *path: int) -> int:
    """A 31-bit seed for one request, a pure function of the batch seed and the request's indices."""
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0]) & 0x7FFFFFFF


def _generate(sampler: Sampler, prompts: list[list[int]], params: list[SamplingParams]) -> list[list[Completion]]:
    results = sampler.generate(prompts, params)
    if len(results) != len(prompts):
        raise SamplerError(f"the sampler returned {len(results)} results for {len(prompts)} prompts")
    for k, (result, p) in enumerate(zip(results, params)):
        if len(result) != p.n:
            raise SamplerError(f"the sampler returned {len(result)} completions for prompt {k}, asked for n={p.n}")
    return results


class _Request(NamedTuple):
    prompt: list[int]
    params: SamplingParams
    # the turns (b, g, a, r) its completions fill, in order; a greedy request asks for one completion
    # and fills every key with it (greedy turns of one prompt are identical: sampling them is waste)
    keys: tuple[tuple[int, int, int, int], ...]


def _filled(request: _Request, result: list[Completion]) -> list[Completion]:
    return list(result) * (len(request.keys) // len(result)) if len(result) == 1 else list(result)


def _drive(sampler: Sampler, ready: list[_Request], advance, stats: dict) -> None:
    """Sample until no request is left; ``advance(finished)`` turns answers into the next requests.

    A :class:`StreamingSampler` gets every request as soon as it is runnable, so a debate's next round
    starts when its own agents have answered (no barrier across the batch); any other sampler gets
    one ``generate`` call per wave of runnable requests (round by round). The seeds are per request,
    so the order of completion changes nothing. Records ``sampling_seconds`` (waiting for the
    sampler), ``sampler_calls``, ``sampled_sequences`` and ``mean_in_flight``: sequences in flight,
    averaged over that time.
    """
    streaming = isinstance(sampler, StreamingSampler)
    inflight: dict[concurrent.futures.Future, _Request] = {}
    sequence_seconds = 0.0
    try:
        while ready or inflight:
            stats["sampled_sequences"] = stats.get("sampled_sequences", 0) + sum(r.params.n for r in ready)
            start = time.perf_counter()
            if streaming:
                for request in ready:
                    inflight[sampler.submit(request.prompt, request.params)] = request
                stats["sampler_calls"] += len(ready)
                sequences = sum(r.params.n for r in inflight.values())
                done, _ = concurrent.futures.wait(inflight, return_when=concurrent.futures.FIRST_COMPLETED)
                finished = sorted(((inflight.pop(f), f.result()) for f in done), key=lambda x: x[0].keys[0])
            else:
                sequences = sum(r.params.n for r in ready)
                results = _generate(sampler, [r.prompt for r in ready], [r.params for r in ready])
                stats["sampler_calls"] += 1
                finished = list(zip(ready, results))
            seconds = time.perf_counter() - start
            stats["sampling_seconds"] += seconds
            sequence_seconds += sequences * seconds
            ready = advance(finished)
    finally:
        for future in inflight:
            future.cancel()
    stats["mean_in_flight"] = sequence_seconds / max(stats["sampling_seconds"], 1e-9)


def run_debates(
    sampler: Sampler,
    tokenizer,
    items: Sequence[Item],
    *,
    config: DebateConfig,
    n_rollouts: int,
    sampling: SamplingParams,
    grader: Grader,
    env_name_remap: Mapping[str, str] | None = None,
    seed: int,
) -> DebateBatch:
    """Play ``n_rollouts`` debates of every item and grade them.

    ``sampling`` gives temperature, top-p, max_tokens and stop strings; its ``n`` and ``seed`` are
    replaced per request. ``env_name_remap`` routes item envs (e.g. ``{"math": "math_debate"}``).
    Raises DataError for an unknown environment or a prompt that cannot fit, before any sampling.
    """
    if isinstance(n_rollouts, bool) or not isinstance(n_rollouts, int) or n_rollouts < 1:
        raise ConfigError(f"n_rollouts must be a positive integer, got {n_rollouts!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if not items:
        raise DataError("run_debates needs at least one item")
    budget = config.max_sequence_length - sampling.max_tokens
    if budget < 1:
        raise ConfigError(
            f"debate.max_sequence_length={config.max_sequence_length} leaves no room for a prompt with "
            f"max_tokens={sampling.max_tokens}"
        )
    envs = envs_for(items, config, env_name_remap)
    B, G = len(items), n_rollouts
    A = max(config.num_agents, *(e.num_agents for e in envs))
    R = max(config.num_rounds, *(e.num_rounds for e in envs))
    first_ids = [tuple(first_prompt(env, item, tokenizer, budget)) for env, item in zip(envs, items)]

    active = np.zeros((B, G, A, R), dtype=bool)
    alive = np.ones((B, G), dtype=bool)
    completions: dict[tuple[int, int, int, int], Completion] = {}
    prompts_of: dict[tuple[int, int, int, int], tuple[int, ...]] = {}
    trims: dict[tuple[int, int, int, int], int] = {}
    answers: dict[tuple[int, int, int, int], str | None] = {}
    stats = {"sampler_calls": 0, "sampling_seconds": 0.0, "grading_seconds": 0.0, "early_stops": 0,
             "trimmed_prompts": 0, "trimmed_answers": 0}
    grading_before = grader.stats

    greedy = sampling.temperature == 0.0

    def first_request(b: int) -> _Request:  # round 1: one prompt for all rollouts and agents
        n = 1 if greedy else G * envs[b].num_agents
        return _Request(list(first_ids[b]), dataclasses.replace(sampling, n=n, seed=derive_seed(seed, b, 0)),
                        tuple((b, g, a, 0) for g in range(G) for a in range(envs[b].num_agents)))

    def later_requests(b: int, g: int, r: int) -> list[_Request]:  # round r > 1 of rollout (b, g)
        env, out = envs[b], []
        previous = [completions[(b, g, j, r - 1)].text for j in range(env.num_agents)]
        for a in range(env.num_agents):
            others = [(j, previous[j]) for j in range(env.num_agents) if j != a]
            ids, trimmed = debate_prompt(env, items[b], tokenizer, previous[a], others, budget)
            key = (b, g, a, r)
            prompts_of[key], trims[key] = tuple(ids), trimmed
            stats["trimmed_prompts"] += bool(trimmed)
            stats["trimmed_answers"] += trimmed
            same = next((i for i, req in enumerate(out) if greedy and req.prompt == ids), None)
            if same is not None:  # greedy: an agent whose prompt another agent already sends
                out[same] = out[same]._replace(keys=out[same].keys + (key,))
                continue
            out.append(_Request(ids, dataclasses.replace(sampling, n=1, seed=derive_seed(seed, b, r, g, a)), (key,)))
        return out

    waiting: dict[tuple[int, int, int], int] = {}  # (b, g, round) -> agents yet to answer

    def advance(finished: list[tuple[_Request, list[Completion]]]) -> list[_Request]:
        """Record answers; the next round of every rollout whose agents have all answered."""
        rounds_done = []
        for request, result in finished:
            for key, completion in zip(request.keys, _filled(request, result)):
                completions[key] = completion
                answers[key] = extract_answer(completion.text, config.extraction)
                active[key] = True
                if key[3] == 0:
                    prompts_of[key] = first_ids[key[0]]
                unit = (key[0], key[1], key[3])
                waiting[unit] = waiting.get(unit, envs[key[0]].num_agents) - 1
                if waiting[unit] == 0:
                    rounds_done.append(unit)
        going_on = [(b, g, r) for b, g, r in sorted(rounds_done) if r + 1 < envs[b].num_rounds]
        if config.early_stop_on_consensus and going_on:
            start = time.perf_counter()
            _early_stop(going_on, envs, answers, alive, grader, stats)
            stats["grading_seconds"] += time.perf_counter() - start
        return [req for b, g, r in going_on if alive[b, g] for req in later_requests(b, g, r + 1)]

    _drive(sampler, [first_request(b) for b in range(B)], advance, stats)

    start = time.perf_counter()
    order = [[key for key in sorted(answers) if key[0] == b] for b in range(B)]
    groups = answer_classes_many([([answers[k] for k in keys], items[b].answer) for b, keys in enumerate(order)],
                                 grader.equivalent_many)
    votes = np.full((B, G, A, R), -1, dtype=np.int32)
    correct = np.zeros((B, G, A, R), dtype=np.float32)
    gold = np.full((B,), -1, dtype=np.int32)
    for b, (keys, classes) in enumerate(zip(order, groups)):
        gold[b] = classes.gold
        for key, vote, ok in zip(keys, classes.votes, classes.correct):
            votes[key] = vote
            correct[key] = float(ok)
    stats["grading_seconds"] += time.perf_counter() - start

    turns = tuple(
        Turn(index=key, item_id=items[key[0]].id, prompt_ids=prompts_of[key],
             completion_ids=tuple(c.token_ids), logprobs=tuple(c.logprobs), truncated=c.truncated,
             weight_version=c.weight_version, text=c.text, answer=answers[key], trimmed=trims.get(key, 0))
        for key, c in sorted(completions.items())
    )
    grading_after = grader.stats
    stats.update({
        "turns": len(turns),
        "truncated": sum(t.truncated for t in turns),
        "no_answer": sum(t.answer is None for t in turns),
        "prompt_tokens": sum(len(t.prompt_ids) for t in turns),
        "completion_tokens": sum(len(t.completion_ids) for t in turns),
        "grading_timeouts": grading_after["timeouts"] - grading_before["timeouts"],
        "grading_rejected": grading_after["rejected"] - grading_before["rejected"],
        "grading_errors": grading_after["errors"] - grading_before["errors"],
    })
    return DebateBatch(
        items=tuple(items), env_names=tuple(e.name for e in envs), correct=correct, votes=votes, gold=gold,
        active=active, turns=turns, classes=tuple(c.representatives for c in groups), stats=stats,
    )


def debate_chunks(sampler: Sampler, tokenizer, items: Sequence[Item], *, batch_size: int, seed: int,
                  **debate_args) -> Iterator[tuple[int, DebateBatch]]:
    """``(offset, batch)`` for each ``batch_size`` items in order: :func:`run_debates` per chunk,
    seeded ``derive_seed(seed, offset)``. The one evaluation loop of ``jaxdebate.eval`` and the
    trainer's validation, so that both sample an item the same way."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    for offset in range(0, len(items), batch_size):
        chunk = list(items[offset:offset + batch_size])
        yield offset, run_debates(sampler, tokenizer, chunk, seed=derive_seed(seed, offset), **debate_args)


def _early_stop(units, envs, answers, alive, grader: Grader, stats) -> None:
    """End the rollouts ``(b, g)`` whose agents all gave equivalent answers in round ``r`` (consensus);
    ``units`` holds the ``(b, g, r)`` that just finished a round and have another one to play."""
    candidates, checks = [], []
    for b, g, r in units:
        round_answers = [answers[(b, g, a, r)] for a in range(envs[b].num_agents)]
        if any(x is None for x in round_answers):
            continue
        candidates.append((b, g, len(round_answers) - 1))
        checks.extend((round_answers[0], x) for x in round_answers[1:])
    flags = iter(grader.equivalent_many(checks) if checks else [])
    for b, g, count in candidates:
        if all([next(flags) for _ in range(count)]):
            alive[b, g] = False
            stats["early_stops"] += 1
