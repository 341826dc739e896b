"""Preference pairs from scored rollouts: correctness pairs first, then coherence pairs.

Per question (a rollout record written by :mod:`jaxdebate.coherence.collect`), over the trajectories
of ``rules.source`` (``arms``: the persona arms; ``canonical``: their canonical-prompt twins):

1. **correctness** — a correct trajectory is chosen over an incorrect one (no answer counts as
   incorrect). Correct trajectories are ranked by quality (best first), incorrect ones by quality (worst
   first); pairs are taken in growing squares of that grid — (1,1), then (1,2), (2,1), (2,2), then the
   third row and column, … — so a per-question cap keeps a variety of chosen and rejected texts.
2. **coherence** — among the correct trajectories, ``i`` is chosen over ``j`` when
   ``quality_i − quality_j`` exceeds the threshold (``max(quality_gap, gap_noise_z × σ)``, see
   :func:`gap_noise`), largest gaps first. When every trajectory ties in quality there are none.

``rules.kind`` keeps one type or both. A truncated trajectory (hit the token limit) is never chosen
unless ``allow_truncated_chosen``; a question's repeated texts count once (:func:`distinct`), so no pair
is made twice and chosen and rejected texts always differ. Every
pair carries its ``split``: a question is held out (``heldout_fraction``, :func:`heldout_ids`) as a
whole, so no held-out question contributes a training pair. Canonical pairs carry the sampled token
ids (``chosen_tokens``/``rejected_tokens``), which training uses verbatim (exactly the policy's text).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxdebate.coherence.config import PairConfig
from jaxdebate.coherence.scores import jaccard, word_set
from jaxdebate.errors import DataError


def _square_order(n_rows: int, n_cols: int) -> list[tuple[int, int]]:
    cells = itertools.product(range(n_rows), range(n_cols))
    return sorted(cells, key=lambda rc: (max(rc), rc[0] + rc[1], rc[0]))


def pool(record: Mapping[str, Any], rules: PairConfig = PairConfig()) -> list[Mapping[str, Any]]:
    """The trajectories of ``record`` that pairs are made of (``rules.source``, probes optional)."""
    if rules.source == "canonical":
        if "canonical" not in record:
            raise DataError(f"rollout record {record.get('id')!r} has no canonical twins: it was collected "
                            "without collect.canonical_twins; collect into a fresh rollouts file")
        return list(record["canonical"])
    return [t for t in record["trajectories"] if rules.include_probes or t.get("role", "variance") == "variance"]


def distinct(trajectories: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first trajectory of each distinct text (its token ids where it has them). Low-temperature
    twins often repeat one another; repeats would make copies of one pair (a question weighted by its
    repeats) and zero gaps in the noise measurement, which no pair can have."""
    seen: set = set()
    out = []
    for t in trajectories:
        key = tuple(t["tokens"]) if t.get("tokens") is not None else t["text"]
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _pair(record: Mapping[str, Any], chosen: Mapping[str, Any], rejected: Mapping[str, Any], kind: str) -> dict:
    out = {
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
        "source": chosen.get("prompt", "arm"),
    }
    if chosen.get("prompt") == "canonical":
        out["chosen_tokens"], out["rejected_tokens"] = list(chosen["tokens"]), list(rejected["tokens"])
    return out


def question_pairs(record: Mapping[str, Any], rules: PairConfig = PairConfig(),
                   threshold: float | None = None) -> list[dict]:
    """The preference pairs of one question, correctness pairs before coherence pairs; a coherence
    pair needs a quality gap above ``threshold`` (default ``rules.quality_gap``)."""
    gap = rules.quality_gap if threshold is None else threshold
    trajs = distinct(pool(record, rules))

    def can_choose(t: Mapping[str, Any]) -> bool:
        return rules.allow_truncated_chosen or t.get("finish_reason") != "length"

    # stable sorts keep arm order among equal qualities, so the result is deterministic
    correct = sorted((t for t in trajs if t["correct"]), key=lambda t: -t["quality"])
    wrong = sorted((t for t in trajs if not t["correct"]), key=lambda t: t["quality"])
    choosable = [t for t in correct if can_choose(t)]

    out: list[dict] = []
    if rules.kind in ("correctness", "both"):
        for r, c in _square_order(len(choosable), len(wrong)):
            if len(out) >= rules.max_correctness_pairs_per_question:
                break
            if choosable[r]["text"] != wrong[c]["text"]:
                out.append(_pair(record, choosable[r], wrong[c], "correctness"))
    if rules.kind == "correctness":
        return out
    candidates = [
        (float(a["quality"]) - float(b["quality"]), i, j, a, b)
        for (i, a), (j, b) in itertools.permutations(enumerate(correct), 2)
        if can_choose(a) and float(a["quality"]) - float(b["quality"]) > gap and a["text"] != b["text"]
    ]
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    for _, _, _, a, b in candidates[: rules.max_coherence_pairs_per_question]:
        out.append(_pair(record, a, b, "coherence"))
    return out


def gap_noise(records: Iterable[Mapping[str, Any]], rules: PairConfig = PairConfig(),
              conciseness_weight: float = 0.4) -> dict[str, Any]:
    """The noise of a quality gap, measured from the two probes' disagreement.

    Quality averages the alignment with the probes A and A′, each a random sample. For two correct
    non-probe trajectories i, j of one question with distinct texts, the gap computed against A alone and against A′ alone
    are two estimates of the same preference; their difference ``d = (1 − w_c)(Δs_A − Δs_A′)`` (``s_p``:
    ½ same answer + ½ word Jaccard with probe p) has E[d²] = 2σ₁², so the standard error of the
    two-probe gap is ``σ = sqrt(mean d²) / 2``, pooled over every such pair of every question. A′
    paraphrases the question, so d also holds a systematic part: σ errs on the large side.
    Returns ``{"se": σ or None, "pairs_measured": n}``.
    """
    sq: list[float] = []
    for record in records:
        probes = {t.get("role"): t for t in record["trajectories"] if t.get("role") in ("A", "A_prime")}
        if len(probes) < 2:
            continue
        refs = [(p.get("answer_class"), word_set(p["text"])) for p in (probes["A"], probes["A_prime"])]
        sims = []
        for t in distinct(pool(record, rules)):
            if t["correct"] and t.get("role", "variance") == "variance":
                words = word_set(t["text"])
                sims.append([0.5 * float(t.get("answer_class") is not None and t.get("answer_class") == cls)
                             + 0.5 * jaccard(words, w) for cls, w in refs])
        for a, b in itertools.combinations(sims, 2):
            sq.append(((1.0 - conciseness_weight) * ((a[0] - b[0]) - (a[1] - b[1]))) ** 2)
    return {"se": math.sqrt(float(np.mean(sq))) / 2 if sq else None, "pairs_measured": len(sq)}


def coherence_threshold(records: Sequence[Mapping[str, Any]], rules: PairConfig = PairConfig(),
                        conciseness_weight: float = 0.4) -> dict[str, Any]:
    """The minimum quality gap of a coherence pair: ``max(quality_gap, gap_noise_z × σ)`` with the
    measurement it came from (``se``, ``pairs_measured``, ``z``, ``threshold``)."""
    noise = gap_noise(records, rules, conciseness_weight) if rules.gap_noise_z > 0 else {"se": None, "pairs_measured": 0}
    measured = rules.gap_noise_z * noise["se"] if noise["se"] is not None else 0.0
    return {**noise, "z": rules.gap_noise_z, "floor": rules.quality_gap, "threshold": max(rules.quality_gap, measured)}


def heldout_ids(ids: Iterable[str], fraction: float, seed: int = 0) -> frozenset[str]:
    """The questions held out: the ``round(fraction × n)`` ids (at least one when ``fraction > 0``, never
    all) first in an order hashed from ``seed`` and the id, so the split depends on neither the order
    of the records nor on anything a question's answers hold."""
    ids = sorted(set(ids))
    if fraction <= 0 or len(ids) < 2:
        return frozenset()
    k = min(len(ids) - 1, max(1, round(fraction * len(ids))))
    ranked = sorted(ids, key=lambda i: hashlib.sha256(f"{seed}\0{i}".encode()).hexdigest())
    return frozenset(ranked[:k])


def build_pairs(records: Sequence[Mapping[str, Any]], rules: PairConfig = PairConfig(), *,
                conciseness_weight: float = 0.4) -> list[dict]:
    """All pairs of all questions, question by question (each question's correctness pairs first),
    each with its ``split`` (``train`` or ``heldout``)."""
    threshold = coherence_threshold(records, rules, conciseness_weight)["threshold"]
    held = heldout_ids((r["id"] for r in records), rules.heldout_fraction, rules.split_seed)
    return [{**p, "split": "heldout" if record["id"] in held else "train"}
            for record in records for p in question_pairs(record, rules, threshold)]


def heldout_questions(records: Sequence[Mapping[str, Any]], rules: PairConfig = PairConfig()) -> list[dict]:
    """``{"id", "question", "gold"}`` of every held-out question (in record order): the per-epoch
    greedy validation set of training."""
    held = heldout_ids((r["id"] for r in records), rules.heldout_fraction, rules.split_seed)
    return [{"id": r["id"], "question": r["question"], "gold": r["gold"]} for r in records if r["id"] in held]


def _mixed(trajectory_lists: Iterable[Sequence[Mapping[str, Any]]]) -> int:
    """How many questions have both a correct and an incorrect trajectory (the ones with a signal)."""
    return sum(1 for ts in trajectory_lists if any(t["correct"] for t in ts) and not all(t["correct"] for t in ts))


def pairs_summary(records: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]],
                  rules: PairConfig = PairConfig(), *, conciseness_weight: float = 0.4) -> dict:
    """Counts by pair type plus the rollout statistics a researcher checks before training: the
    questions with mixed outcomes (some trajectories right, some wrong), the split, the measured
    quality-gap noise and the threshold it set."""
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

    def types(ps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        c = Counter(p["pair_type"] for p in ps)
        return {"correctness": c.get("correctness", 0), "coherence": c.get("coherence", 0)}

    held = heldout_ids((r["id"] for r in records), rules.heldout_fraction, rules.split_seed)
    out = {
        "questions": len(records),
        "questions_with_pairs": len({p["question_id"] for p in pairs}),
        "questions_all_correct": sum(
            1 for rec, k in zip(records, n_correct) if rec["trajectories"] and k == len(rec["trajectories"])
        ),
        "questions_none_correct": sum(1 for k in n_correct if k == 0),
        "questions_mixed": _mixed(pool(rec, rules) for rec in records),
        "questions_mixed_by_source": {"arms": _mixed(rec["trajectories"] for rec in records)},
        "trajectories": n_traj,
        "trajectory_accuracy": (sum(n_correct) / n_traj) if n_traj else None,
        "accuracy_by_arm": {arm: float(np.mean(v)) for arm, v in per_arm.items()},
        "mean_s_end": mean_score("s_end"),
        "mean_s_path": mean_score("s_path"),
        "mean_s_cf": mean_score("s_cf"),
        "pairs": len(pairs),
        "pairs_by_type": types(pairs),
        "source": rules.source,
        "kind": rules.kind,
        "coherence_gap": coherence_threshold(records, rules, conciseness_weight),
        "split": {
            name: {"questions": sum((r["id"] in held) == (name == "heldout") for r in records),
                   "questions_mixed": _mixed(pool(r, rules) for r in records if (r["id"] in held) == (name == "heldout")),
                   "pairs": sum(p.get("split", "train") == name for p in pairs),
                   "pairs_by_type": types([p for p in pairs if p.get("split", "train") == name])}
            for name in ("train", "heldout")
        },
    }
    pools = [pool(rec, rules) for rec in records]
    out["pool"] = {  # what the pairs were made of (``rules.source``); the counts above are over every arm
        "questions_all_correct": sum(1 for ts in pools if ts and all(t["correct"] for t in ts)),
        "questions_none_correct": sum(1 for ts in pools if not any(t["correct"] for t in ts)),
        "questions_mixed": _mixed(pools),
        "texts": sum(len(ts) for ts in pools),
        "distinct_texts": sum(len(distinct(ts)) for ts in pools),
    }
    twins = [rec["canonical"] for rec in records if "canonical" in rec]
    if twins:
        flat = [bool(t["correct"]) for ts in twins for t in ts]
        out["questions_mixed_by_source"]["canonical"] = _mixed(twins)
        out["canonical_trajectory_accuracy"] = float(np.mean(flat)) if flat else None
    return out
