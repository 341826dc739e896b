"""Collect every arm's trajectory for N questions through the Sampler interface, score them, and
append one JSONL record per question (resumable: finished questions are skipped).

``questions_per_batch`` questions × all arms go to the sampler in one ``generate`` call, each prompt
with its own SamplingParams (the arm's temperature and per-question seed). Record layout::

    {"id", "index", "question", "gold", "scores": {"s_end", "s_path", "s_cf"},
     "trajectories": [{"arm_name", "role", "persona", "temperature", "seed", "question", "text",
                       "answer", "answer_class", "correct", "tokens", "n_tokens", "finish_reason",
                       "conciseness", "alignment", "quality", "reward"}, ...],
     "canonical": [... the same fields and "prompt": "canonical" ...]}   # with collect.canonical_twins

``answer`` is the extracted final answer (``Answer: …``, ``#### …`` or ``\\boxed{…}``), and
``answer_class`` groups equivalent answers of one question (the agreement unit of the scores).

Why twins are re-sampled rather than re-scored (issue 28): a persona arm's text is a sample of the
policy under another prompt; its log-prob under the canonical prompt says how off-policy it is but
does not make it a text the policy would write there. A twin is the arm's own draw (temperature,
seed) under the exact prompt DPO trains and evaluates with, so canonical pairs are on-policy by
construction, at the cost of sampling every question twice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxdebate import jsonl
from jaxdebate.coherence.arms import (
    SEED_FORMAT, AnswerFormat, Arm, arm_messages, arm_seed, canonical_messages, transform_question,
)
from jaxdebate.coherence.config import CollectConfig, ScoreConfig
from jaxdebate.coherence.scores import score_question
from jaxdebate.data import Item
from jaxdebate.debate.classes import answer_classes_many
from jaxdebate.sampling.base import Completion, Sampler, SamplingParams


def requests(
    batch: Sequence[tuple[int, Item]], arms: Sequence[Arm], tokenizer: Any, *, top_p: float, max_tokens: int,
    fmt: AnswerFormat = SEED_FORMAT, canonical_twins: bool = False,
) -> tuple[list[list[int]], list[SamplingParams]]:
    """Prompt token ids and SamplingParams for every (question, arm), question-major; with
    ``canonical_twins`` each question's block continues with every arm again under the canonical
    prompt (same temperature, same seed)."""
    prompts, params = [], []
    for index, item in batch:
        variants = [arm_messages(arm, item.problem, fmt) for arm in arms]
        if canonical_twins:
            variants += [canonical_messages(item.problem, fmt)] * len(arms)
        for k, messages in enumerate(variants):
            arm = arms[k % len(arms)]
            prompts.append(tokenizer.encode_chat(messages))
            params.append(SamplingParams(
                temperature=arm.temperature, top_p=top_p, max_tokens=max_tokens, n=1,
                seed=arm_seed(arm, index),
            ))
    return prompts, params


def _trajectory(arm: Arm, index: int, question: str, c: Completion, answer, key, ok, sc, i: int) -> dict[str, Any]:
    return {
        "arm_name": arm.name, "role": arm.role, "persona": arm.persona, "temperature": arm.temperature,
        "seed": arm_seed(arm, index), "question": question,
        "text": c.text, "answer": answer, "answer_class": key, "correct": bool(ok),
        "tokens": list(c.token_ids), "n_tokens": len(c.token_ids), "finish_reason": c.finish_reason,
        "conciseness": sc.conciseness[i], "alignment": sc.alignment[i], "quality": sc.quality[i],
        "reward": sc.reward[i],
    }


def build_records(
    batch: Sequence[tuple[int, Item]],
    arms: Sequence[Arm],
    completions: Sequence[Completion],
    equivalent_many: Any,
    scores: ScoreConfig,
    fmt: AnswerFormat = SEED_FORMAT,
    canonical_twins: bool = False,
) -> list[dict[str, Any]]:
    """Grade, group and score the completions of a batch (question-major blocks as :func:`requests`
    made them).

    Twins (``canonical_twins``) go to the record's ``canonical`` list, marked ``"prompt":
    "canonical"`` with role ``variance`` (a twin of a probe is an ordinary canonical sample). Their
    answers are grouped with the arms' (one answer-class space per question) and they are scored
    against the persona probes: the quality formulas run on the twins plus the A, A′
    and CF1 trajectories, so the probes still define what a coherent answer is while the texts that
    train are the policy's own for the canonical prompt.
    """
    n_arms = len(arms)
    block = n_arms * (2 if canonical_twins else 1)
    weights = dict(path_length_weight=scores.path_length_weight, conciseness_weight=scores.conciseness_weight,
                   coherence_weight=scores.coherence_weight)
    groups = []
    for q, (_, item) in enumerate(batch):
        texts = [c.text for c in completions[q * block:(q + 1) * block]]
        groups.append(([fmt.extract(t) for t in texts], item.answer))
    classes = answer_classes_many(groups, equivalent_many)
    records = []
    for q, ((index, item), cls) in enumerate(zip(batch, classes)):
        comps = completions[q * block:(q + 1) * block]
        answers = groups[q][0]
        keys = [v if v >= 0 else None for v in cls.votes]
        ok = list(cls.correct)
        lengths = [len(c.token_ids) for c in comps]
        sc = score_question(keys[:n_arms], [c.text for c in comps[:n_arms]], lengths[:n_arms], ok[:n_arms],
                            [a.role for a in arms], **weights)
        trajectories = [
            _trajectory(arm, index, transform_question(item.problem, arm.transform), comps[i], answers[i], keys[i],
                        ok[i], sc, i)
            for i, arm in enumerate(arms)
        ]
        record = {
            "id": item.id, "index": index, "question": item.problem, "gold": item.answer,
            "scores": {"s_end": sc.s_end, "s_path": sc.s_path, "s_cf": sc.s_cf},
            "trajectories": trajectories,
        }
        if canonical_twins:
            probes = [i for i, a in enumerate(arms) if a.role != "variance"]
            rows = list(range(n_arms, 2 * n_arms)) + probes
            tsc = score_question([keys[i] for i in rows], [comps[i].text for i in rows], [lengths[i] for i in rows],
                                 [ok[i] for i in rows], ["variance"] * n_arms + [arms[i].role for i in probes],
                                 **weights)
            record["canonical"] = [
                {**_trajectory(arm, index, item.problem, comps[n_arms + i], answers[n_arms + i], keys[n_arms + i],
                               ok[n_arms + i], tsc, i), "role": "variance", "prompt": "canonical"}
                for i, arm in enumerate(arms)
            ]
        records.append(record)
    return records


def collect(
    items: Sequence[Item],
    sampler: Sampler,
    tokenizer: Any,
    grader: Any,
    out_path: str | Path,
    collect_cfg: CollectConfig,
    score_cfg: ScoreConfig,
    *,
    top_p: float = 1.0,
    max_tokens: int = 384,
    fmt: AnswerFormat = SEED_FORMAT,
    progress: bool = True,
    decoder: str | None = None,
) -> dict[str, Any]:
    """Sample, grade, score and append records for the items not yet in ``out_path``; return stats.
    ``decoder`` (``sampling.factory.decoder``) goes into every new record: a collection resumed on
    another machine says which questions each decoder sampled."""
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    done = jsonl.finished_keys(out_path)
    size = collect_cfg.questions_per_batch
    # Batches are fixed slices of the item list: a resumed run regenerates an unfinished slice with
    # exactly the same requests (prompt order included), so its samples are the same as the first time.
    chunks = [list(enumerate(items))[s:s + size] for s in range(0, len(items), size)]
    chunks = [c for c in chunks if any(it.id not in done for _, it in c)]
    arms = collect_cfg.arms
    twins = collect_cfg.canonical_twins
    skipped = sum(it.id in done for it in items)
    stats = {"questions": len(items), "skipped": skipped, "collected": 0, "completions": 0,
             "tokens": 0, "seconds_sampling": 0.0, "seconds_grading": 0.0}
    bar = tqdm(total=len(items), initial=skipped, desc="collect", unit="q", disable=not progress,
               dynamic_ncols=True)
    try:
        for batch in chunks:
            prompts, params = requests(batch, arms, tokenizer, top_p=top_p, max_tokens=max_tokens, fmt=fmt,
                                       canonical_twins=twins)
            t0 = time.perf_counter()
            completions = [c[0] for c in sampler.generate(prompts, params)]
            t1 = time.perf_counter()
            records = build_records(batch, arms, completions, grader.equivalent_many, score_cfg, fmt, twins)
            stats["seconds_grading"] += time.perf_counter() - t1
            stats["seconds_sampling"] += t1 - t0
            new = [{**r, "decoder": decoder} if decoder else r for r in records if r["id"] not in done]
            jsonl.append_records(out_path, new)
            stats["collected"] += len(new)
            stats["completions"] += len(completions)
            stats["tokens"] += sum(len(c.token_ids) for c in completions)
            bar.update(len(new))
            bar.set_postfix(tok_s=f"{stats['tokens'] / max(stats['seconds_sampling'], 1e-9):.0f}")
    finally:
        bar.close()
    return stats
