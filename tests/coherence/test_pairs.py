"""Pairing rules on hand-made scored rollouts."""

from jaxdebate.coherence.config import PairConfig as PairRules
from jaxdebate.coherence.pairs import build_pairs, pairs_summary, question_pairs


def traj(name, correct, quality, text=None, role="variance", finish="stop"):
    return {
        "arm_name": name, "role": role, "correct": correct, "quality": quality, "reward": float(correct) + quality,
        "text": text if text is not None else f"text of {name}", "finish_reason": finish,
    }


def record(trajs, qid="q0"):
    return {"id": qid, "question": "What is 1+1?", "gold": "2", "trajectories": trajs,
            "scores": {"s_end": 0.5, "s_path": 0.5, "s_cf": 1.0}}


def test_correctness_pairs_come_first_then_coherence_pairs():
    rec = record([
        traj("c_hi", True, 0.9), traj("c_mid", True, 0.5), traj("c_tie", True, 0.505),
        traj("w_lo", False, 0.1), traj("w_hi", False, 0.8),
    ])
    pairs = question_pairs(rec, PairRules(max_correctness_pairs_per_question=100, max_coherence_pairs_per_question=100))
    kinds = [p["pair_type"] for p in pairs]
    assert kinds == ["correctness"] * 6 + ["coherence"] * 2
    # every correct beats every incorrect; the best correct vs the worst incorrect comes first
    assert (pairs[0]["chosen_arm"], pairs[0]["rejected_arm"]) == ("c_hi", "w_lo")
    assert {(p["chosen_arm"], p["rejected_arm"]) for p in pairs[:6]} == {
        (c, w) for c in ("c_hi", "c_mid", "c_tie") for w in ("w_lo", "w_hi")
    }
    # coherence pairs only where the quality gap exceeds 0.01, largest gap first; c_tie vs c_mid (0.005) excluded
    coh = [(p["chosen_arm"], p["rejected_arm"]) for p in pairs[6:]]
    assert coh == [("c_hi", "c_mid"), ("c_hi", "c_tie")]
    assert all(p["quality_gap"] > 0.01 for p in pairs[6:])
    for p in pairs:
        assert {"question", "chosen", "rejected", "pair_type"} <= set(p)
        assert p["chosen"] == f"text of {p['chosen_arm']}"


def test_zero_coherence_pairs_when_every_trajectory_ties():
    rec = record([traj(f"c{i}", True, 0.7) for i in range(6)] + [traj("w", False, 0.7)])
    pairs = question_pairs(rec, PairRules(max_correctness_pairs_per_question=100, max_coherence_pairs_per_question=100))
    assert [p["pair_type"] for p in pairs] == ["correctness"] * 6
    all_correct = record([traj(f"c{i}", True, 0.7) for i in range(6)])
    assert question_pairs(all_correct) == []


def test_gap_threshold_is_strict_and_configurable():
    rec = record([traj("a", True, 0.52), traj("b", True, 0.5)])
    assert question_pairs(rec, PairRules(quality_gap=0.01))[0]["pair_type"] == "coherence"
    assert question_pairs(rec, PairRules(quality_gap=0.03)) == []


def test_caps_keep_variety_in_square_order():
    rec = record([traj(f"c{i}", True, 0.5) for i in range(3)] + [traj(f"w{i}", False, 0.1 * i) for i in range(3)])
    pairs = question_pairs(rec, PairRules(max_correctness_pairs_per_question=4))
    assert [(p["chosen_arm"], p["rejected_arm"]) for p in pairs] == [
        ("c0", "w0"), ("c0", "w1"), ("c1", "w0"), ("c1", "w1"),
    ]


def test_truncated_never_chosen_identical_texts_dropped_probes_optional():
    rec = record([
        traj("trunc", True, 0.3, finish="length"), traj("ok", True, 0.5), traj("copy", True, 0.1, text="text of ok"),
        traj("probe", True, 0.2, role="A"), traj("w", False, 0.1),
    ])
    pairs = question_pairs(rec, PairRules(max_correctness_pairs_per_question=100, max_coherence_pairs_per_question=100))
    assert all(p["chosen_arm"] != "trunc" for p in pairs)
    assert ("trunc" in {p["rejected_arm"] for p in pairs})  # may still be rejected in a coherence pair
    assert all(p["chosen"] != p["rejected"] for p in pairs)
    no_probes = question_pairs(rec, PairRules(include_probes=False, max_coherence_pairs_per_question=100))
    assert all("probe" not in (p["chosen_arm"], p["rejected_arm"]) for p in no_probes)
    allowed = question_pairs(rec, PairRules(allow_truncated_chosen=True, max_correctness_pairs_per_question=100))
    assert "trunc" in {p["chosen_arm"] for p in allowed}


def test_summary_counts_by_type():
    recs = [
        record([traj("a", True, 0.9), traj("b", True, 0.5), traj("w", False, 0.2)], "q1"),
        record([traj("a", False, 0.9), traj("b", False, 0.5), traj("w", False, 0.2)], "q2"),
        record([traj("a", True, 0.5), traj("b", True, 0.5), traj("w", True, 0.5)], "q3"),
    ]
    pairs = build_pairs(recs)
    summary = pairs_summary(recs, pairs)
    assert summary["pairs_by_type"] == {"correctness": 2, "coherence": 1}
    assert summary["pairs"] == 3
    assert summary["questions"] == 3
    assert summary["questions_with_pairs"] == 1
    assert summary["questions_all_correct"] == 1
    assert summary["questions_none_correct"] == 1
    assert summary["accuracy_by_arm"] == {"a": 2 / 3, "b": 2 / 3, "w": 1 / 3}
    assert summary["trajectory_accuracy"] == 5 / 9


# --- issue 28: pair kinds, canonical twins, the measured coherence threshold, the held-out split ---

import math

import pytest

from jaxdebate.coherence.pairs import coherence_threshold, gap_noise, heldout_ids, heldout_questions
from jaxdebate.errors import DataError


def scored(name, correct, quality, text, role="variance", cls=0, **extra):
    return {**traj(name, correct, quality, text, role), "answer_class": cls if correct else 9, **extra}


def probed_record(variance, qid="q0", canonical=None):
    """A question with the three probes (A: 'a b c', A': 'a b d', both answer class 0) and the given
    variance trajectories (and canonical twins)."""
    rec = record([*variance, scored("A", True, 0.5, "a b c", "A"), scored("Ap", True, 0.5, "a b d", "A_prime"),
                  scored("CF", True, 0.5, "zz", "CF1")], qid)
    if canonical is not None:
        rec["canonical"] = canonical
    return rec


def test_kind_keeps_one_pair_type_or_both():
    rec = record([traj("c_hi", True, 0.9), traj("c_lo", True, 0.5), traj("w", False, 0.1)])
    rules = dict(max_correctness_pairs_per_question=100, max_coherence_pairs_per_question=100)
    both = [p["pair_type"] for p in question_pairs(rec, PairRules(**rules))]
    assert both == ["correctness", "correctness", "coherence"]
    assert [p["pair_type"] for p in question_pairs(rec, PairRules(kind="correctness", **rules))] == ["correctness"] * 2
    assert [p["pair_type"] for p in question_pairs(rec, PairRules(kind="coherence", **rules))] == ["coherence"]


def test_canonical_source_pairs_the_twins_with_their_sampled_tokens():
    twins = [{**scored("w0", True, 0.8, "twin right", tokens=[5, 6, 2]), "prompt": "canonical"},
             {**scored("w1", False, 0.2, "twin wrong", tokens=[7, 2]), "prompt": "canonical"}]
    rec = probed_record([scored("v", True, 0.9, "persona right"), scored("x", False, 0.1, "persona wrong")],
                        canonical=twins)
    rules = PairRules(source="canonical", max_correctness_pairs_per_question=100)
    pairs = question_pairs(rec, rules)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("twin right", "twin wrong")]
    assert pairs[0]["chosen_tokens"] == [5, 6, 2] and pairs[0]["rejected_tokens"] == [7, 2]
    assert pairs[0]["source"] == "canonical"
    legacy = question_pairs(rec, PairRules(max_correctness_pairs_per_question=100))
    assert all("chosen_tokens" not in p and p["source"] == "arm" for p in legacy)
    with pytest.raises(DataError, match="canonical_twins"):
        question_pairs(probed_record([scored("v", True, 0.9, "t")]), rules)


def test_gap_noise_by_hand_sets_the_coherence_threshold():
    # s_p = 1/2 [same answer] + 1/2 Jaccard(words, probe p); probes A = {a,b,c}, A' = {a,b,d}
    # v1 'a b c': s_A = 1, s_A' = 0.75 ; v2 'x y': s_A = 0.5, s_A' = 0.5 ; the wrong one is not measured
    # d = (1 - 0.4) * ((1 - 0.5) - (0.75 - 0.5)) = 0.15 -> se = sqrt(0.15^2) / 2 = 0.075
    rec = probed_record([scored("v1", True, 0.80, "a b c"), scored("v2", True, 0.62, "x y"),
                         scored("w", False, 0.1, "a b c d")])
    noise = gap_noise([rec], PairRules(), conciseness_weight=0.4)
    assert noise["pairs_measured"] == 1 and noise["se"] == pytest.approx(0.075)
    t = coherence_threshold([rec], PairRules(gap_noise_z=2.0))
    assert t["threshold"] == pytest.approx(0.15) and t["floor"] == 0.01
    assert coherence_threshold([rec], PairRules())["threshold"] == 0.01  # z = 0: the fixed floor
    assert coherence_threshold([rec], PairRules(gap_noise_z=0.1, quality_gap=0.05))["threshold"] == 0.05

    # v1 over v2 has a gap of 0.18 > 0.15: kept; v1 over A (0.30) too, but A' over v2 (0.5-0.62 < 0) not
    rules = PairRules(gap_noise_z=2.0, kind="coherence", max_coherence_pairs_per_question=100)
    coh = [(p["chosen_arm"], p["rejected_arm"]) for p in build_pairs([rec], rules)]
    assert ("v1", "v2") in coh and all(b != "v1" for _, b in coh)
    # a gap of 0.12 is below the measured threshold, though far above the old 0.01
    rec["trajectories"][1]["quality"] = 0.68
    many = dict(kind="coherence", max_coherence_pairs_per_question=100)
    coh = [(p["chosen_arm"], p["rejected_arm"]) for p in build_pairs([rec], PairRules(gap_noise_z=2.0, **many))]
    assert ("v1", "v2") not in coh
    assert ("v1", "v2") in [(p["chosen_arm"], p["rejected_arm"]) for p in build_pairs([rec], PairRules(**many))]


def test_heldout_split_is_by_question_deterministic_and_order_free():
    ids = [f"q{i}" for i in range(50)]
    held = heldout_ids(ids, 0.2, seed=3)
    assert len(held) == 10 and held == heldout_ids(list(reversed(ids)), 0.2, seed=3)
    assert held != heldout_ids(ids, 0.2, seed=4)
    assert heldout_ids(ids, 0.0) == frozenset() and len(heldout_ids(ids[:3], 0.01)) == 1
    assert len(heldout_ids(ids[:2], 0.9)) == 1  # never every question

    recs = [record([traj("a", True, 0.9), traj("b", True, 0.5), traj("w", False, 0.2)], f"q{i}") for i in range(10)]
    rules = PairRules(heldout_fraction=0.3, split_seed=1)
    pairs = build_pairs(recs, rules)
    split_of = {}
    for p in pairs:
        assert split_of.setdefault(p["question_id"], p["split"]) == p["split"]  # a question is never split
    held = heldout_ids([r["id"] for r in recs], 0.3, 1)
    assert {q for q, s in split_of.items() if s == "heldout"} == held and len(held) == 3
    assert [q["id"] for q in heldout_questions(recs, rules)] == [r["id"] for r in recs if r["id"] in held]
    summary = pairs_summary(recs, pairs, rules)
    assert summary["split"]["heldout"]["questions"] == 3 and summary["split"]["train"]["questions"] == 7
    assert summary["split"]["heldout"]["pairs"] + summary["split"]["train"]["pairs"] == len(pairs)
    assert summary["split"]["heldout"]["pairs"] == sum(p["split"] == "heldout" for p in pairs) > 0


def test_summary_counts_mixed_questions_per_source():
    twin = lambda name, ok: {**scored(name, ok, 0.5, f"twin {name}", tokens=[1]), "prompt": "canonical"}  # noqa: E731
    recs = [
        probed_record([scored("v", True, 0.5, "r"), scored("w", False, 0.5, "x")], "mixed_both",
                      canonical=[twin("a", True), twin("b", False)]),
        probed_record([scored("v", True, 0.5, "r")], "mixed_twins_only", canonical=[twin("a", True), twin("b", False)]),
        probed_record([scored("v", True, 0.5, "r"), scored("w", False, 0.5, "x")], "mixed_arms_only",
                      canonical=[twin("a", False), twin("b", False)]),
    ]
    arms = pairs_summary(recs, build_pairs(recs))
    assert arms["questions_mixed"] == 2 and arms["questions_mixed_by_source"] == {"arms": 2, "canonical": 2}
    rules = PairRules(source="canonical")
    canonical = pairs_summary(recs, build_pairs(recs, rules), rules)
    assert canonical["questions_mixed"] == 2 and canonical["source"] == "canonical"
    assert canonical["canonical_trajectory_accuracy"] == pytest.approx(2 / 6)
    assert math.isclose(canonical["coherence_gap"]["threshold"], 0.01)


def test_repeated_twins_make_each_pair_once_and_do_not_shrink_the_noise():
    # six identical right twins and five identical wrong ones are one right and one wrong text: one
    # correctness pair, not a cap's worth of copies
    right = [{**scored(f"r{i}", True, 0.8, "41", tokens=[52, 2]), "prompt": "canonical"} for i in range(6)]
    wrong = [{**scored(f"w{i}", False, 0.2, "31", tokens=[51, 2]), "prompt": "canonical"} for i in range(5)]
    rec = probed_record([scored("v", True, 0.9, "persona")], canonical=right + wrong)
    rules = PairRules(source="canonical", max_correctness_pairs_per_question=8, max_coherence_pairs_per_question=8)
    pairs = question_pairs(rec, rules)
    assert [(p["chosen_arm"], p["rejected_arm"]) for p in pairs] == [("r0", "w0")]
    summary = pairs_summary([rec], pairs, rules)
    assert summary["pool"] == {"questions_all_correct": 0, "questions_none_correct": 0, "questions_mixed": 1,
                               "texts": 11, "distinct_texts": 2}

    # the noise is measured on distinct texts only: repeating v2 adds no zero-gap pairs (se as by hand above)
    texts = [scored("v1", True, 0.80, "a b c"), scored("v2", True, 0.62, "x y"), scored("v3", True, 0.62, "x y")]
    noise = gap_noise([probed_record(texts)], PairRules(), conciseness_weight=0.4)
    assert noise["pairs_measured"] == 1 and noise["se"] == pytest.approx(0.075)
