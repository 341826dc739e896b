"""Coherence scores on hand-made trajectories: every formula checked against numbers worked out by hand."""

import math

import numpy as np
import pytest

from jaxdebate.coherence import scores as S

ROLES = ["variance", "variance", "A", "A_prime", "CF1"]


def test_word_set_and_jaccard():
    assert S.word_set("So 3 + 4.5 = 7.5, Answer: 7.5") == frozenset({"so", "3", "4.5", "7.5", "answer"})
    a, b = frozenset("abc"), frozenset("bcd")
    assert S.jaccard(a, b) == pytest.approx(2 / 4)
    assert S.jaccard(frozenset(), frozenset()) == 1.0
    assert S.jaccard(a, frozenset()) == 0.0


def test_s_end_is_plurality_share_and_zero_without_answers():
    assert S.s_end(["4", "4", "5", None]) == pytest.approx(2 / 4)
    assert S.s_end(["4", "4", "4"]) == 1.0
    assert S.s_end([None, None]) == 0.0
    assert S.s_end([]) == 0.0


def test_length_coherence_and_s_path():
    assert S.length_coherence([10, 10, 10]) == 1.0
    # mean 20, population std 10 -> CV 0.5
    assert S.length_coherence([10, 30]) == pytest.approx(0.5)
    assert S.length_coherence([1, 100]) == pytest.approx(1 - min(1, np.std([1, 100]) / np.mean([1, 100])))
    assert S.length_coherence([0, 0]) == 1.0
    sets = [frozenset("ab"), frozenset("bc"), frozenset("ab")]
    # pairs: (ab,bc)=1/3, (ab,ab)=1, (bc,ab)=1/3 -> mean 5/9
    assert S.mean_pairwise_jaccard(sets) == pytest.approx(5 / 9)
    assert S.s_path(sets, [10, 30, 20], 0.4) == pytest.approx(
        0.4 * (1 - np.std([10, 30, 20]) / 20) + 0.6 * 5 / 9
    )


def test_s_cf_varies_with_cf1_answer():
    probes = ["12", "12"]
    assert S.s_cf("12", probes) == 1.0
    assert S.s_cf("13", probes) == 0.0
    assert S.s_cf(None, probes) == 0.0
    assert S.s_cf("12", ["12", "99"]) == 0.5
    assert S.s_cf("12", ["12", None]) == 0.5
    assert S.s_cf(None, [None, None]) == 0.0  # missing answers never agree


def test_conciseness_and_alignment():
    np.testing.assert_allclose(S.conciseness([10, 20, 40]), [1.0, 0.5, 0.25])
    np.testing.assert_allclose(S.conciseness([0, 2]), [1.0, 0.5])  # lengths floored at one token
    answers = ["5", "5", "5", "6"]
    sets = [frozenset("ab"), frozenset("abcd"), frozenset("ab"), frozenset("ab")]
    align = S.alignment(answers, sets, probe_indices=[2, 3])
    # traj 0 vs A (idx 2): 0.5*1 + 0.5*1 = 1 ; vs A' (idx 3): 0.5*0 + 0.5*1 = 0.5 -> 0.75
    # traj 1 vs A: 0.5 + 0.5*0.5 = 0.75 ; vs A': 0 + 0.25 = 0.25 -> 0.5
    # A itself only against A': 0.5 ; A' only against A: 0.5
    np.testing.assert_allclose(align, [0.75, 0.5, 0.5, 0.5])


def test_score_question_by_hand():
    texts = ["a b c", "a b c d e f", "a b c", "a b", "x y"]
    lengths = [10, 20, 10, 10, 10]
    answers = ["7", "7", "7", "7", "8"]
    correct = [True, True, True, True, False]
    sc = S.score_question(answers, texts, lengths, correct, ROLES)
    assert sc.s_end == pytest.approx(4 / 5)
    assert sc.s_cf == 0.0
    sets = [S.word_set(t) for t in texts]
    assert sc.s_path == pytest.approx(
        0.4 * S.length_coherence(lengths) + 0.6 * S.mean_pairwise_jaccard(sets)
    )
    conc = [1.0, 0.5, 1.0, 1.0, 1.0]
    # alignment vs A ("a b c", answer 7) and A' ("a b", answer 7)
    j = S.jaccard
    align0 = 0.5 * ((0.5 + 0.5 * j(sets[0], sets[2])) + (0.5 + 0.5 * j(sets[0], sets[3])))
    align1 = 0.5 * ((0.5 + 0.5 * j(sets[1], sets[2])) + (0.5 + 0.5 * j(sets[1], sets[3])))
    assert sc.alignment[0] == pytest.approx(align0)
    assert sc.alignment[1] == pytest.approx(align1)
    assert sc.quality[0] == pytest.approx(0.4 * conc[0] + 0.6 * align0)
    assert sc.quality[1] == pytest.approx(0.4 * conc[1] + 0.6 * align1)
    # the shorter, probe-aligned correct trajectory has the higher quality: correct ones are separated
    assert sc.quality[0] > sc.quality[1]
    question_level = (sc.s_end + sc.s_path + sc.s_cf) / 3
    for i in range(5):
        assert sc.reward[i] == pytest.approx(correct[i] + 0.2 * (0.5 * sc.quality[i] + 0.5 * question_level))
    assert all(0.0 <= x <= 1.2 for x in sc.reward)


def test_s_cf_in_score_question_follows_cf1_answer():
    texts = ["t"] * 5
    base = dict(texts=texts, lengths=[5] * 5, correct=[True] * 5, roles=ROLES)
    agree = S.score_question(["3", "3", "3", "3", "3"], **base)
    half = S.score_question(["3", "3", "3", "4", "4"], **base)  # A'=4, CF1=4 -> agrees with A' only
    none = S.score_question(["3", "3", "3", "3", "9"], **base)
    assert (agree.s_cf, half.s_cf, none.s_cf) == (1.0, 0.5, 0.0)


def test_identical_trajectories_tie_in_quality():
    sc = S.score_question(["1"] * 5, ["same text"] * 5, [7] * 5, [True] * 5, ROLES)
    assert len(set(sc.quality)) == 1
    assert sc.s_end == sc.s_path == sc.s_cf == 1.0
    assert all(math.isclose(r, 1.2) for r in sc.reward)


def test_score_question_rejects_bad_input():
    with pytest.raises(ValueError, match="lengths"):
        S.score_question(["1"], ["a", "b"], [1], [True], ["A"])
    with pytest.raises(ValueError, match="CF1"):
        S.score_question(["1", "1"], ["a", "b"], [1, 1], [True, True], ["A", "variance"])
