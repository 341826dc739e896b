"""Validation on held-out problems: one debate per problem with the evaluation sampling settings.

Reports, over all held-out items: per-agent accuracy, accuracy by round, debate (plurality of the
last played round) accuracy, first-round majority-vote accuracy, and the accuracy of all turns; and
how often no number was parsed, per turn and per debate, so an accuracy that falls because the policy
stopped answering in the format is told apart from one that falls because it answers wrongly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


from jaxdebate.data import Item
from jaxdebate.debate import DebateConfig, Grader, debate_chunks, plurality_votes
from jaxdebate.sampling.base import Sampler, SamplingParams


def accuracy_report(batches: Sequence[Any]) -> dict[str, float]:
    """Accuracies over the items of several DebateBatches (each counted by its own turns/debates). A
    per-agent or per-round accuracy with no turn behind it (an agent or round the set's environment does
    not play, as in single-agent validation) is left out rather than logged as NaN."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}

    def add(name: str, total: float, n: float) -> None:
        sums[name] = sums.get(name, 0.0) + float(total)
        counts[name] = counts.get(name, 0.0) + float(n)

    for batch in batches:
        correct, active = batch.correct, batch.active
        add("accuracy", correct[active].sum(), active.sum())
        for a in range(active.shape[2]):
            mask = active[:, :, a, :]
            add(f"accuracy/agent_{a}", correct[:, :, a, :][mask].sum(), mask.sum())
        for r in range(active.shape[3]):
            mask = active[..., r]
            add(f"accuracy/round_{r}", correct[..., r][mask].sum(), mask.sum())
        played = active.any(axis=(2, 3))
        add("accuracy/debate", batch.debate_correct()[played].sum(), played.sum())
        first = plurality_votes(batch.votes[..., :1], active[..., :1])[..., 0]
        first_ok = (first == batch.gold[:, None]) & (batch.gold[:, None] >= 0)
        add("accuracy/majority_first_round", first_ok[played].sum(), played.sum())
        add("truncated_fraction", batch.stats.get("truncated", 0), batch.stats.get("turns", 0))
        add("no_answer_fraction", batch.stats.get("no_answer", 0), batch.stats.get("turns", 0))
        add("no_answer_fraction/debate", (batch.debate_answers() < 0)[played].sum(), played.sum())
    breakdown = ("accuracy/agent_", "accuracy/round_")
    return {k: (sums[k] / counts[k] if counts[k] else float("nan")) for k in sums
            if counts[k] or not k.startswith(breakdown)} | {
        "items": float(sum(len(b.items) for b in batches))
    }


def validate(
    sampler: Sampler,
    tokenizer,
    items: Sequence[Item],
    *,
    debate: DebateConfig,
    sampling: SamplingParams,
    grader: Grader,
    env_name_remap,
    batch_size: int,
    seed: int,
) -> tuple[dict[str, float], list[Any]]:
    """Debate every held-out item once (``batch_size`` items per sampler call); ``(metrics, batches)``."""
    batches = [batch for _, batch in debate_chunks(
        sampler, tokenizer, items, batch_size=batch_size, seed=seed, config=debate, n_rollouts=1, sampling=sampling,
        grader=grader, env_name_remap=env_name_remap)]
    return (accuracy_report(batches) if batches else {}), batches


def item_rows(batches: Sequence[Any], *, set_name: str, mode: str) -> list[dict[str, Any]]:
    """One JSON row per validated item (its first debate): every agent's answer and correctness per
    round (None / False where the turn was not played), the debate's answer and whether it is right.
    These paired rows are what per-run tests (McNemar, step 0 vs the end) are computed from."""
    rows = []
    for batch in batches:
        turns = {t.index: t for t in batch.turns}
        answers = batch.debate_answers()
        final_ok = batch.debate_correct()
        # the agents and rounds the batch's environment plays (a single-agent env: 1 x 1)
        n_agents = int(batch.active.any(axis=(0, 1, 3)).nonzero()[0].max(initial=-1)) + 1
        n_rounds = int(batch.active.any(axis=(0, 1, 2)).nonzero()[0].max(initial=-1)) + 1
        for b, item in enumerate(batch.items):
            chosen = int(answers[b, 0])
            rows.append({
                "id": item.id, "gold": item.answer, "set": set_name, "mode": mode,
                "answers": [[getattr(turns.get((b, 0, a, r)), "answer", None) for r in range(n_rounds)]
                            for a in range(n_agents)],
                "correct": [[bool(batch.active[b, 0, a, r] and batch.correct[b, 0, a, r]) for r in range(n_rounds)]
                            for a in range(n_agents)],
                "answer": batch.classes[b][chosen] if chosen >= 0 else None,
                "correct_final": bool(final_ok[b, 0]),
            })
    return rows
