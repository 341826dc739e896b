"""The debate protocol (DESIGN §3): play a batch of items × G rollouts, round by round.

Every round of the whole batch is ONE ``sampler.generate`` call. Round 1 prompts are identical for an
item's rollouts and agents, so they are one prompt with ``n = G × A``; later rounds have one prompt per
(rollout, agent). Each request gets a seed derived from ``(seed, b, round[, g, a])``, so a batch is
reproducible with any Sampler that honours seeds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np

from jaxdebate.data.items import Item
from jaxdebate.debate.answers import extract_answer
from jaxdebate.debate.batch import DebateBatch, Turn
from jaxdebate.debate.classes import answer_classes_many
from jaxdebate.debate.config import DebateConfig
from jaxdebate.debate.envs import make_env, route
from jaxdebate.debate.fitting import debate_prompt, first_prompt
from jaxdebate.debate.grading import Grader
from jaxdebate.errors import ConfigError, DataError, SamplerError
from jaxdebate.sampling.base import Completion, Sampler, SamplingParams


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
    env_cache = {}
    envs = []
    for item in items:
        name = route(item.env, dict(env_name_remap or {}))
        if name not in env_cache:
            try:
                env_cache[name] = make_env(name, config)
            except DataError as e:
                raise DataError(f"item {item.id!r} (env {item.env!r}): {e}") from None
        envs.append(env_cache[name])
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

    for r in range(R):
        prompts, params, targets = [], [], []
        for b, (item, env) in enumerate(zip(items, envs)):
            if r >= env.num_rounds:
                continue
            if r == 0:
                prompts.append(list(first_ids[b]))
                params.append(dataclasses.replace(sampling, n=G * env.num_agents, seed=derive_seed(seed, b, 0)))
                targets.append([(b, g, a, 0) for g in range(G) for a in range(env.num_agents)])
                continue
            for g in range(G):
                if not alive[b, g]:
                    continue
                previous = [completions[(b, g, j, r - 1)].text for j in range(env.num_agents)]
                for a in range(env.num_agents):
                    others = [(j, previous[j]) for j in range(env.num_agents) if j != a]
                    ids, trimmed = debate_prompt(env, item, tokenizer, previous[a], others, budget)
                    key = (b, g, a, r)
                    prompts_of[key], trims[key] = tuple(ids), trimmed
                    stats["trimmed_prompts"] += bool(trimmed)
                    stats["trimmed_answers"] += trimmed
                    prompts.append(ids)
                    params.append(dataclasses.replace(sampling, n=1, seed=derive_seed(seed, b, r, g, a)))
                    targets.append([key])
        if not prompts:
            break
        start = time.perf_counter()
        results = _generate(sampler, prompts, params)
        stats["sampler_calls"] += 1
        stats["sampling_seconds"] += time.perf_counter() - start
        for keys, result in zip(targets, results):
            for key, completion in zip(keys, result):
                completions[key] = completion
                answers[key] = extract_answer(completion.text, config.extraction)
                active[key] = True
                if key[3] == 0:
                    prompts_of[key] = first_ids[key[0]]
        if config.early_stop_on_consensus and r + 1 < R:
            start = time.perf_counter()
            _early_stop(items, envs, answers, alive, r, G, grader, stats)
            stats["grading_seconds"] += time.perf_counter() - start

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


def _early_stop(items, envs, answers, alive, r, G, grader: Grader, stats) -> None:
    """End the rollouts whose agents all gave equivalent answers in round r (consensus)."""
    candidates, checks = [], []
    for b, env in enumerate(envs):
        if r + 1 >= env.num_rounds:
            continue
        for g in range(G):
            if not alive[b, g]:
                continue
            round_answers = [answers[(b, g, a, r)] for a in range(env.num_agents)]
            if any(x is None for x in round_answers):
                continue
            candidates.append((b, g, len(round_answers) - 1))
            checks.extend((round_answers[0], x) for x in round_answers[1:])
    flags = iter(grader.equivalent_many(checks) if checks else [])
    for b, g, count in candidates:
        if all([next(flags) for _ in range(count)]):
            alive[b, g] = False
            stats["early_stops"] += 1
