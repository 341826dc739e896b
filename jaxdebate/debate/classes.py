"""Answer classes of a group: equivalent answers share an id (the ``votes``/``gold`` arrays, DESIGN §4).

All answers equivalent to the gold answer form one class (the gold class); the others are grouped
greedily: an answer joins the class of the first earlier class leader it is equivalent to. Exact
duplicates (after :func:`normalize`) are merged without any check, and all equivalence checks of many
groups go to the grader in two batched calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from jaxdebate.debate.answers import normalize

EquivalentMany = Callable[[Sequence[tuple[str, str]]], list[bool]]


@dataclasses.dataclass(frozen=True)
class GroupClasses:
    """``votes[i]``: class id of answer i (-1: no answer); ``gold``: the gold class id (-1 if no answer
    is correct); ``correct[i]``: answer i is equivalent to the gold answer; ``representatives[k]``: the
    first answer of class k."""

    votes: tuple[int, ...]
    gold: int
    correct: tuple[bool, ...]
    representatives: tuple[str, ...]


def answer_classes_many(
    groups: Sequence[tuple[Sequence[str | None], str]], equivalent_many: EquivalentMany
) -> list[GroupClasses]:
    """Classes of each (answers, gold answer) group; ``equivalent_many`` checks (reference, answer) pairs."""
    uniques: list[list[str]] = []  # per group: distinct normalised answers' first spellings
    slots: list[list[int]] = []  # per group: answer position -> unique index (-1: none)
    for answers, _ in groups:
        seen: dict[str, int] = {}
        firsts: list[str] = []
        slot = []
        for answer in answers:
            if answer is None or not answer.strip():
                slot.append(-1)
                continue
            key = normalize(answer)
            if key not in seen:
                seen[key] = len(firsts)
                firsts.append(answer)
            slot.append(seen[key])
        uniques.append(firsts)
        slots.append(slot)

    gold_checks = [(gold, u) for (_, gold), firsts in zip(groups, uniques) for u in firsts]
    gold_flags = iter(equivalent_many(gold_checks))
    is_gold = [[next(gold_flags) for _ in firsts] for firsts in uniques]

    pair_index: list[tuple[int, int, int]] = []
    pair_checks: list[tuple[str, str]] = []
    for gi, (firsts, flags) in enumerate(zip(uniques, is_gold)):
        wrong = [i for i, ok in enumerate(flags) if not ok]
        for x, i in enumerate(wrong):
            for j in wrong[x + 1:]:
                pair_index.append((gi, i, j))
                pair_checks.append((firsts[i], firsts[j]))
    same = set()
    for key, eq in zip(pair_index, equivalent_many(pair_checks) if pair_checks else []):
        if eq:
            same.add(key)

    results = []
    for gi, (firsts, flags, slot) in enumerate(zip(uniques, is_gold, slots)):
        class_of: list[int] = []
        leaders: list[int] = []  # unique indices that opened a (non-gold) class
        representatives: list[str] = []
        gold_class = -1
        for j, answer in enumerate(firsts):
            if flags[j]:
                if gold_class < 0:
                    gold_class = len(representatives)
                    representatives.append(answer)
                class_of.append(gold_class)
                continue
            leader = next((i for i in leaders if (gi, i, j) in same), None)
            if leader is None:
                leaders.append(j)
                class_of.append(len(representatives))
                representatives.append(answer)
            else:
                class_of.append(class_of[leader])
        votes = tuple(class_of[s] if s >= 0 else -1 for s in slot)
        correct = tuple(s >= 0 and flags[s] for s in slot)
        results.append(GroupClasses(votes, gold_class, correct, tuple(representatives)))
    return results


def plurality(votes: Sequence[int]) -> int:
    """Plurality of agents' votes (in agent order; -1 = none): ties go to the tied answer given first
    by the lowest-index agent (DESIGN §3); -1 when nobody answered."""
    counts: dict[int, int] = {}
    for v in votes:
        if v >= 0:
            counts[v] = counts.get(v, 0) + 1
    if not counts:
        return -1
    best = max(counts.values())
    return next(v for v in votes if v >= 0 and counts[v] == best)
