"""The 11 arms as data, and the question transforms of the probes."""

import json
import re
from pathlib import Path

import pytest

from jaxdebate.coherence import arms as A
from jaxdebate.errors import ConfigError

GSM8K_TRAIN = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k_train.jsonl"
SAMPLE = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
    "Compute 3.5 times 4",
]


def numbers(text):
    return sorted(re.findall(r"\d+(?:\.\d+)?", text))


def test_default_arms_match_design():
    arms = A.default_arms()
    assert len(arms) == 11
    table = {a.name: (a.persona, a.temperature, a.seed, a.transform, a.role) for a in arms}
    for i, t in enumerate((0.2, 0.3, 0.4, 0.5)):
        assert table[f"wolfram_{i}"] == ("wolfram", t, 42 + i, "identity", "variance")
        assert table[f"maudlin_{i}"] == ("maudlin", t, 100 + i, "identity", "variance")
    assert table["wolfram_standard"][2:] == (1000, "identity", "A")
    assert table["wolfram_rephrase"][2:] == (1001, "rephrase", "A_prime")
    assert table["maudlin_cf1"][0] == "maudlin" and table["maudlin_cf1"][2:] == (2000, "counterfactual", "CF1")
    A.validate_arms(arms)


def test_arm_validation_names_the_field():
    with pytest.raises(ConfigError, match="collect.arms.*persona"):
        A.Arm("x", "socrates", 0.3, 1)
    with pytest.raises(ConfigError, match="temperature"):
        A.Arm("x", "wolfram", -0.1, 1)
    with pytest.raises(ConfigError, match="transform"):
        A.Arm("x", "wolfram", 0.3, 1, transform="shuffle")
    arms = A.default_arms()
    with pytest.raises(ConfigError, match="duplicate"):
        A.validate_arms(arms + arms[:1])
    with pytest.raises(ConfigError, match="CF1"):
        A.validate_arms([a for a in arms if a.role != "CF1"])


@pytest.mark.parametrize("question", SAMPLE)
def test_transforms_keep_every_number_and_change_the_text(question):
    for fn in (A.rephrase, A.counterfactual):
        out = fn(question)
        assert out != question
        assert numbers(out) == numbers(question)
        assert fn(question) == out  # deterministic


def test_transforms_on_real_gsm8k_questions():
    if not GSM8K_TRAIN.is_file():
        pytest.skip(f"{GSM8K_TRAIN} not present")
    with open(GSM8K_TRAIN) as f:
        questions = [json.loads(next(f))["question"] for _ in range(300)]
    for q in questions:
        for fn in (A.rephrase, A.counterfactual):
            out = fn(q)
            assert numbers(out) == numbers(q), (fn.__name__, q, out)
        cf = A.counterfactual(q)
        assert any(p in cf for p in A.COUNTERFACTUAL_PREMISES)
        # the question being asked is still last
        assert cf.endswith(A.split_question(q)[1][-1])
    assert len({A.counterfactual(q).replace(q, "") for q in questions}) > 1  # premises vary across questions


def test_counterfactual_premises_are_number_free():
    for p in A.COUNTERFACTUAL_PREMISES:
        assert not re.search(r"\d", p)
        assert not re.search(r"\b(one|two|three|four|five|six|seven|eight|nine|ten|half|twice|double)\b", p, re.I)


def test_arm_messages_and_seeds():
    arms = {a.name: a for a in A.default_arms()}
    msgs = A.arm_messages(arms["maudlin_cf1"], SAMPLE[0])
    assert msgs[0] == {"role": "system", "content": A.PERSONAS["maudlin"]}
    assert A.counterfactual(SAMPLE[0]) in msgs[1]["content"]
    assert "Answer: <number>" in msgs[1]["content"]
    assert A.canonical_messages(SAMPLE[0])[-1]["content"].startswith(SAMPLE[0])
    seeds = {A.arm_seed(a, q) for a in arms.values() for q in range(50)}
    assert len(seeds) == 11 * 50
    assert A.arm_seed(arms["wolfram_0"], 3) == A.arm_seed(arms["wolfram_0"], 3)
