"""The real public data files in ../shared/data: every item reads and every gold answer extracts."""

from __future__ import annotations

import json

import pytest

from jaxdebate.data import load_items
from jaxdebate.data.sources import DATASETS, repo_shared_data_dir
from jaxdebate.debate import Grader, extract_answer

SHARED = repo_shared_data_dir()
pytestmark = pytest.mark.skipif(
    not (SHARED / "math500.jsonl").is_file() or not (SHARED / "gsm8k_platinum_test.jsonl").is_file(),
    reason=f"the shared public data files are not present in {SHARED}",
)


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv("JAXDEBATE_DATA", raising=False)


def test_all_math500_items_and_gold_answers():
    items = load_items("math500")
    assert len(items) == 500 and len({it.id for it in items}) == 500
    assert all(it.id.startswith("test/") and it.id.endswith(".json") for it in items)
    assert {it.meta["level"] for it in items} == {1, 2, 3, 4, 5}
    assert len({it.meta["subject"] for it in items}) == 7
    extracted = [extract_answer(it.meta["solution"]) for it in items]
    assert all(e is not None for e in extracted)
    with Grader() as grader:
        agree = grader.equivalent_many([(it.answer, e) for it, e in zip(items, extracted)])
    mismatches = [(it.id, it.answer, e) for it, e, ok in zip(items, extracted, agree) if not ok]
    assert not mismatches  # the boxed answer of every worked solution is the gold answer


def test_all_gsm8k_platinum_items_and_gold_answers():
    items = load_items("gsm8k_platinum")
    assert len(items) == 1209
    assert [it.meta["platinum_index"] for it in items] == list(range(1209))
    raw = [json.loads(line) for line in (SHARED / DATASETS["gsm8k_platinum"].filename).read_text().splitlines()]
    for item, record in zip(items, raw):
        gold = extract_answer(record["answer"])  # the '#### N' line, through the model-output path
        assert gold is not None and gold.replace(",", "") == item.answer
        float(item.answer)  # every gold answer is a plain number
    test_items = load_items("gsm8k_test")
    assert len(test_items) == 1319
    for item in items:
        assert test_items[item.meta["gsm8k_test_index"]].problem == item.problem
    revised = [it.meta["gsm8k_test_index"] for it in items if it.meta["answer_revised_vs_gsm8k"]]
    assert len(revised) == 10
    assert all(test_items[i].answer != it.answer
               for i, it in ((it.meta["gsm8k_test_index"], it) for it in items if it.meta["answer_revised_vs_gsm8k"]))


def test_gsm8k_train_reads():
    items = load_items("gsm8k_train")
    assert len(items) == 7473
    assert all(it.answer.lstrip("-").replace(".", "", 1).isdigit() for it in items)
