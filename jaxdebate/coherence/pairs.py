"""Preference pairs from scored rollouts: correctness pairs first, then coherence pairs.

Per question (a rollout record written by :mod:`jaxdebate.coherence.collect`):

1. **correctness** — a correct trajectory is chosen over an incorrect one (no answer counts as
   incorrect). Correct trajectories are ranked by quality (best first), incorrect ones by quality (worst
   first); pairs are taken in growing squares of that grid — (1,1), then (1,2), (2,1), (2,2), then the
   third row and column, … — so a per-question cap keeps a variety of chosen and rejected texts.
2. **coherence** — among the correct trajectories, ``i`` is chosen over ``j`` when
   ``quality_i − quality_j > quality_gap`` (default 0.01), largest gaps first. When every trajectory ties
   in quality there are no coherence pairs.

A truncated trajectory (hit the token limit) is never chosen unless ``allow_truncated_chosen``; pairs
with identical chosen and rejected texts are dropped.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxdebate.coherence.config import PairConfig


def _square_order(n_rows: int, n_cols: int) -> list[tuple[int, int]]:
    cells = itertools.product(range(n_rows), range(n_cols))
    return sorted(cells, key=lambda rc: (max(rc), rc[0] + rc[1], rc[0]))


def _pair(record: Mapping[str, Any], chosen: Mapping[str, Any], rejected: Mapping[str, Any], kind: str) -> dict:
    return {
        "question_id": record["id"],
        "question": record["question"],
        "gold": record["gold"],
        "pair_type": kind,
        "chosen": chosen["text"],
        "rejected": rejected["text"],
        "chosen_arm": chosen["arm_name"],
        "rejected_arm": rejected["arm_name"],
        "chosen_finish_reason": chosen.get("finish_reason", "stop"),
        "rejected_finish_reason": rejected.get("finish_reason", "stop"),
        "chosen_correct": bool(chosen["correct"]),
        "rejected_correct": bool(rejected["correct"]),
        "chosen_quality": float(chosen["quality"]),
        "rejected_quality": float(rejected["quality"]),
        "quality_gap": float(chosen["quality"]) - float(rejected["quality"]),
        "chosen_reward": float(chosen["reward"]),
        "rejected_reward": float(rejected["reward"]),
    }


def question_pairs(record: Mapping[str, Any], rules: PairConfig = PairConfig()) -> list[dict]:
    """The preference pairs of one question, correctness pairs before coherence pairs."""
    trajs = [t for t in record["trajectories"] if rules.include_probes or t.get("role", "variance") == "variance"]

    def can_choose(t: Mapping[str, Any]) -> bool:
        return rules.allow_truncated_chosen or t.get("finish_reason") != "length"

    # stable sorts keep arm order among equal qualities, so the result is deterministic
    correct = sorted((t for t in trajs if t["correct"]), key=lambda t: -t["quality"])
    wrong = sorted((t for t in trajs if not t["correct"]), key=lambda t: t["quality"])
    choosable = [t for t in correct if can_choose(t)]

    out: list[dict] = []
    for r, c in _square_order(len(choosable), len(wrong)):
        if len(out) >= rules.max_correctness_pairs_per_question:
            break
        if choosable[r]["text"] != wrong[c]["text"]:
            out.append(_pair(record, choosable[r], wrong[c], "correctness"))

    candidates = [
        (float(a["quality"]) - float(b["quality"]), i, j, a, b)
        for (i, a), (j, b) in itertools.permutations(enumerate(correct), 2)
        if can_choose(a) and float(a["quality"]) - float(b["quality"]) > rules.quality_gap and a["text"] != b["text"]
    ]
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    for _, _, _, a, b in candidates[: rules.max_coherence_pairs_per_question]:
        out.append(_pair(record, a, b, "coherence"))
    return out


def build_pairs(records: Iterable[Mapping[str, Any]], rules: PairConfig = PairConfig()) -> list[dict]:
    """All pairs of all questions, question by question (each question's correctness pairs first)."""
    return [p for record in records for p in question_pairs(record, rules)]


def pairs_summary(records: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]]) -> dict:
    """Counts by pair type plus the rollout statistics a researcher checks before training."""
    by_type = Counter(p["pair_type"] for p in pairs)
    per_arm: dict[str, list[bool]] = defaultdict(list)
    n_correct = []
    for rec in records:
        flags = [bool(t["correct"]) for t in rec["trajectories"]]
        n_correct.append(sum(flags))
        for t in rec["trajectories"]:
            per_arm[t["arm_name"]].append(bool(t["correct"]))
    n_traj = sum(len(rec["trajectories"]) for rec in records)

    def mean_score(key: str) -> float | None:
        vals = [rec["scores"][key] for rec in records]
        return float(np.mean(vals)) if vals else None

    return {
        "questions": len(records),
        "questions_with_pairs": len({p["question_id"] for p in pairs}),
        "questions_all_correct": sum(
            1 for rec, k in zip(records, n_correct) if rec["trajectories"] and k == len(rec["trajectories"])
        ),
        "questions_none_correct": sum(1 for k in n_correct if k == 0),
        "trajectories": n_traj,
        "trajectory_accuracy": (sum(n_correct) / n_traj) if n_traj else None,
        "accuracy_by_arm": {arm: float(np.mean(v)) for arm, v in per_arm.items()},
        "mean_s_end": mean_score("s_end"),
        "mean_s_path": mean_score("s_path"),
        "mean_s_cf": mean_score("s_cf"),
        "pairs": len(pairs),
        "pairs_by_type": {"correctness": by_type.get("correctness", 0), "coherence": by_type.get("coherence", 0)},
    }
