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
