"""Canonical twins (issue 28): every arm re-sampled under the prompt DPO trains and evaluates with, at
the arm's temperature and seed, scored against the persona probes, and trained on verbatim; and the
strict / lenient grading of an answer."""

import dataclasses
import json

import numpy as np
import pytest

from jaxdebate import jsonl
from jaxdebate.coherence import arms as A
from jaxdebate.coherence.__main__ import main
from jaxdebate.coherence.batching import encode_pairs
from jaxdebate.coherence.collect import requests
from jaxdebate.coherence.evaluate import graded_rows, lenient_answer, strict_answer
from jaxdebate.coherence.scores import jaccard, word_set
from jaxdebate.data import Item

ITEMS = [(0, Item("q0", "Compute $2 + 3$.", "5")), (7, Item("q7", "Compute $4 + 4$.", "8"))]


@pytest.mark.parametrize("protocol", ["seed", "answer_line"])
def test_twin_requests_use_the_canonical_prompt_and_the_arms_sampling(tokenizer, protocol):
    fmt = A.AnswerFormat.named(protocol)
    arms = A.default_arms()
    prompts, params = requests(ITEMS, arms, tokenizer, top_p=0.9, max_tokens=16, fmt=fmt, canonical_twins=True)
    n = len(arms)
    assert len(prompts) == len(params) == 2 * n * len(ITEMS)
    for q, (index, item) in enumerate(ITEMS):
        block = slice(2 * n * q, 2 * n * (q + 1))
        p, sp = prompts[block], params[block]
        canonical = tokenizer.encode_chat(A.canonical_messages(item.problem, fmt))
        for k, arm in enumerate(arms):
            assert p[k] == tokenizer.encode_chat(A.arm_messages(arm, item.problem, fmt))
            assert p[n + k] == canonical  # the very prompt encode_pairs and evaluation use
            for s in (sp[k], sp[n + k]):
                assert (s.temperature, s.seed, s.top_p, s.max_tokens) == (arm.temperature, A.arm_seed(arm, index), 0.9, 16)
        assert all(p[k] != canonical for k in range(n))  # every arm has a persona system prompt
    plain, _ = requests(ITEMS, arms, tokenizer, top_p=0.9, max_tokens=16, fmt=fmt)
    assert plain == [p for q in range(len(ITEMS)) for p in prompts[2 * n * q: 2 * n * q + n]]


def test_collect_with_twins_on_a_real_tiny_model(tmp_path):
    """The random tiny model, sampled through the pipeline: each record holds the 11 persona
    trajectories and 11 canonical twins; twins carry their arm's sampling, are scored against the
    persona probes (alignment by hand), and their sampled tokens are what a pair trains on."""
    from jaxdebate.model import load_tokenizer

    run = tmp_path / "run"
    args = ["collect", "--config", "configs/coherence_smoke.py", "--workdir", str(run), "--no-progress",
            "--set", "collect.canonical_twins=true", "--set", "data.n_questions=2"]
    assert main(args) == 0
    records = jsonl.read_records(run / "rollouts.jsonl")
    assert len(records) == 2
    differs = 0
    for rec in records:
        arms, twins = rec["trajectories"], rec["canonical"]
        assert [t["arm_name"] for t in twins] == [t["arm_name"] for t in arms]
        for arm, twin in zip(arms, twins):
            assert (twin["temperature"], twin["seed"]) == (arm["temperature"], arm["seed"])
            assert twin["prompt"] == "canonical" and twin["role"] == "variance" and twin["question"] == rec["question"]
            assert "prompt" not in arm
            differs += twin["tokens"] != arm["tokens"]
        probes = [t for t in arms if t["role"] in ("A", "A_prime")]
        for twin in twins:  # alignment with the persona probes A and A', by hand
            sims = [0.5 * (twin["answer_class"] is not None and twin["answer_class"] == p["answer_class"])
                    + 0.5 * jaccard(word_set(twin["text"]), word_set(p["text"])) for p in probes]
            assert twin["alignment"] == pytest.approx(np.mean(sims))
    assert differs > 0  # another prompt, other samples: twins are not copies of the persona texts

    tok = load_tokenizer("tiny")
    twin_a, twin_b = records[0]["canonical"][:2]
    pair = {"question": records[0]["question"], "chosen": twin_a["text"], "rejected": twin_b["text"],
            "chosen_tokens": twin_a["tokens"], "rejected_tokens": twin_b["tokens"]}
    enc = encode_pairs([pair], tok, 1024).pairs[0]
    assert list(enc.chosen) == twin_a["tokens"] and list(enc.rejected) == twin_b["tokens"]
    assert list(enc.prompt) == tok.encode_chat(A.canonical_messages(records[0]["question"]))
    config = json.loads((run / "config.json").read_text())
    assert config["collect"]["canonical_twins"] is True


def test_strict_and_lenient_answers():
    assert strict_answer("3 + 4 = 7\nAnswer: 7") == "7"
    assert strict_answer("Answer: 1,200.") == "1200" and strict_answer("  Answer: -3") == "-3"
    assert strict_answer("So the answer is 7.") is None  # no answer line: the format was not followed
    assert strict_answer("Answer: 7 apples") is None and strict_answer("The Answer: 7 is here") is None
    assert strict_answer("Answer: 5\nwait\nAnswer: 6") == "6"
    assert lenient_answer("So the answer is 7.") == "7" and lenient_answer("3 + 4 = 7") == "7"
    assert lenient_answer("Answer: 7 apples, 9 pears") == "9" and lenient_answer("no digits") is None


def test_graded_rows_grade_three_extractions():
    from jaxdebate.debate.grading import Grader

    items = [Item("a", "Q?", "7"), Item("b", "Q?", "7"), Item("c", "Q?", "7")]
    texts = ["3 + 4 = 7\nAnswer: 7", "so it is 7", "Answer: 8\nno, 7"]
    with Grader() as grader:
        rows = graded_rows(items, texts, grader, A.SEED_FORMAT)
    assert [r["format_ok"] for r in rows] == [True, False, True]
    assert [r["correct_strict"] for r in rows] == [True, False, False]
    assert [r["correct_lenient"] for r in rows] == [True, True, False]
    assert [r["correct"] for r in rows] == [True, False, False]  # the seed protocol's marked extraction


def test_evaluation_rows_of_another_setting_are_refused_before_any_sampling(tmp_path):
    from jaxdebate.coherence import evaluate as ev
    from jaxdebate.data import Item
    from jaxdebate.errors import DataError

    items = [Item(id="q1", problem="1 + 1", answer="2")]
    out = tmp_path / "eval" / "dpo.jsonl"
    kw = dict(max_tokens=48, batch_size=4, label="dpo", progress=False, decoder="jax float32 on cpu (AVX2 only)")
    # rows that say nothing of what made them (an older run) are not trusted
    jsonl.append_records(out, [{"id": "q1", "answer": "2", "correct": True}])
    with pytest.raises(DataError, match="no dpo.jsonl.setting.json"):
        ev.evaluate(items, None, None, None, out, weights="adapter aaa", **kw)
    out.unlink()
    # the first evaluation records its setting; a resumed one with other weights or budget is refused
    assert jsonl.check_setting(out, {"weights": "adapter aaa", "decoder": kw["decoder"], "max_tokens": 48,
                                  "temperature": 0.0, "format": dataclasses.asdict(ev.SEED_FORMAT)},
                            what="answers", remedy="") == "recorded"
    jsonl.append_records(out, [{"id": "q1", "answer": "2", "correct": True}])
    with pytest.raises(DataError, match=r"dpo.jsonl holds answers of another setting \(weights differ"):
        ev.evaluate(items, None, None, None, out, weights="adapter bbb", **kw)
    with pytest.raises(DataError, match=r"max_tokens differ"):
        ev.evaluate(items, None, None, None, out, weights="adapter aaa", **{**kw, "max_tokens": 256})
    # answers of the same weights from another backend, precision or machine are not this decoder's
    with pytest.raises(DataError, match=r"decoder differ"):
        ev.evaluate(items, None, None, None, out, weights="adapter aaa",
                    **{**kw, "decoder": "vllm bfloat16 on local server (avx512_bf16)"})
    # the same setting keeps the rows without sampling (the sampler is never touched)
    assert [r["id"] for r in ev.evaluate(items, None, None, None, out, weights="adapter aaa", **kw)] == ["q1"]
