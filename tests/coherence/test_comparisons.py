"""The coherence report's statistical comparisons, on hand-made numbers (the report over real runs is
tested in test_pipeline.py)."""

import pytest

from jaxdebate.coherence.comparisons import INCONCLUSIVE, item_test, seed_test, with_holm
from jaxdebate.errors import DataError
from jaxdebate.stats import holm, mcnemar_test, one_sample_t


def test_seed_test_is_the_t_test_over_seeds_and_refuses_a_fake_interval():
    diffs = [0.05, 0.11, 0.02]
    ref = one_sample_t(diffs)
    assert seed_test(diffs) == {"mean_difference": ref["mean"], "ci95": ref["ci95"], "p": ref["p"], "n_seeds": 3}
    # two seeds that tie (accuracies are multiples of 1/300): no spread, so no interval and no p, not p = 0
    tied = seed_test([0.04, 0.04])
    assert tied["ci95"] is None and tied["p"] is None and tied["no_spread"] and tied["mean_difference"] == pytest.approx(0.04)
    # a tie of two runs' differences (4 items on every seed) that rounding hides: still no spread
    rounded = [174 / 300 - 170 / 300, 188 / 300 - 184 / 300, 174 / 300 - 170 / 300]
    assert len(set(rounded)) == 2  # the floats differ in the last bit
    assert seed_test(rounded)["p"] is None and seed_test(rounded)["no_spread"]
    with pytest.raises(ValueError):
        seed_test([0.1])


def test_with_holm_adjusts_the_family_and_says_inconclusive_where_it_is():
    entries = [{"mean_difference": 0.2, "p": 0.001}, {"mean_difference": -0.1, "p": 0.004},
               {"mean_difference": 0.05, "p": 0.03}, {"mean_difference": 0.0, "p": None}]
    with_holm(entries)
    assert [e["p_holm"] for e in entries[:3]] == holm([0.001, 0.004, 0.03]) and entries[3]["p_holm"] is None
    # Holm: 0.001 x 3, 0.004 x 2, 0.03 x 1 -> all below 0.05
    assert [e["verdict"] for e in entries] == ["higher", "lower", "higher", INCONCLUSIVE]
    # each alone below 0.05, but not as a family of two: 0.03 x 2 = 0.06, and the step-down keeps the max
    weak = [{"mean_difference": 0.1, "p": 0.03}, {"mean_difference": 0.1, "p": 0.04}]
    with_holm(weak)
    assert [e["p_holm"] for e in weak] == pytest.approx([0.06, 0.06])
    assert [e["verdict"] for e in weak] == [INCONCLUSIVE, INCONCLUSIVE]

def test_item_test_pairs_by_id_and_refuses_different_items():
    first = {"a": True, "b": False, "c": True, "d": False}
    second = {"d": True, "c": True, "b": True, "a": False}  # another order: paired by id, not position
    assert item_test(first, second, "x") == {"n": 4, "only_first": 1, "only_second": 2, "p": mcnemar_test(1, 2)}
    with pytest.raises(DataError, match="sft vs rpo.*different items"):
        item_test(first, {**second, "e": True}, "sft vs rpo")
