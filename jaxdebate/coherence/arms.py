"""The sampling arms of the coherence pipeline, as data: persona, temperature, seed, question transform.

Eight *variance* arms sample the same question with two personas at four temperatures; three *probes*
give the reference points the scores compare against (DESIGN §8):

* ``A``  (``wolfram_standard``): the canonical question, canonical reasoning;
* ``A′`` (``wolfram_rephrase``): a deterministic paraphrase of the question (:func:`rephrase`);
* ``CF1`` (``maudlin_cf1``): a counterfactual variant (:func:`counterfactual`) — the question with an
  inserted counterfactual premise that, by construction, changes none of its quantities, so a robust
  solver gives the same answer as on A/A′. ``s_cf`` measures exactly that agreement.

Both transforms keep every number of the question (tested), so the gold answer is the same for all arms.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Sequence

from jaxdebate.errors import ConfigError

ANSWER_INSTRUCTION = (
    "Solve the problem step by step. End with a final line of the form 'Answer: <number>'."
)

PERSONAS: dict[str, str] = {
    "wolfram": (
        "You are Wolfram, a precise computational thinker. Name every quantity in the problem, "
        "compute each step explicitly, and check the arithmetic before answering."
    ),
    "maudlin": (
        "You are Maudlin, a careful philosopher of mathematics. First restate what is being asked, "
        "reason about what each quantity means, then compute the result step by step."
    ),
}

TRANSFORMS = ("identity", "rephrase", "counterfactual")
ROLES = ("variance", "A", "A_prime", "CF1")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One way of sampling a question: ``role`` says whether it is a variance arm or which probe it is."""

    name: str
    persona: str
    temperature: float
    seed: int
    transform: str = "identity"
    role: str = "variance"

    def __post_init__(self) -> None:
        where = f"arm {self.name!r}"
        if not self.name or not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ConfigError(f"collect.arms: arm name {self.name!r} must be a non-empty identifier")
        if self.persona not in PERSONAS:
            raise ConfigError(f"collect.arms: {where} persona {self.persona!r} is not one of {sorted(PERSONAS)}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"collect.arms: {where} temperature {self.temperature} is not in [0, 2]")
        if self.transform not in TRANSFORMS:
            raise ConfigError(f"collect.arms: {where} transform {self.transform!r} is not one of {TRANSFORMS}")
        if self.role not in ROLES:
            raise ConfigError(f"collect.arms: {where} role {self.role!r} is not one of {ROLES}")


def default_arms() -> tuple[Arm, ...]:
    """The 11 arms of DESIGN §8: wolfram/maudlin at T 0.2–0.5 (seeds 42–45 / 100–103) and A, A′, CF1."""
    temps = (0.2, 0.3, 0.4, 0.5)
    arms = [Arm(f"wolfram_{i}", "wolfram", t, 42 + i) for i, t in enumerate(temps)]
    arms += [Arm(f"maudlin_{i}", "maudlin", t, 100 + i) for i, t in enumerate(temps)]
    arms += [
        Arm("wolfram_standard", "wolfram", 0.3, 1000, "identity", "A"),
        Arm("wolfram_rephrase", "wolfram", 0.3, 1001, "rephrase", "A_prime"),
        Arm("maudlin_cf1", "maudlin", 0.3, 2000, "counterfactual", "CF1"),
    ]
    return tuple(arms)


def validate_arms(arms: Sequence[Arm]) -> None:
    """Unique names and exactly one arm per probe role (the scores need A, A′ and CF1)."""
    names = [a.name for a in arms]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"collect.arms: duplicate arm names {dupes}")
    for role in ("A", "A_prime", "CF1"):
        count = sum(a.role == role for a in arms)
        if count != 1:
            raise ConfigError(f"collect.arms: need exactly one arm with role {role!r}, found {count}")
    if not any(a.role == "variance" for a in arms):
        raise ConfigError("collect.arms: need at least one arm with role 'variance'")


# --- question transforms -------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z\"'$0-9])")
# Whole-word substitutions that keep the meaning of a word problem (applied case-preservingly).
_SYNONYMS = (
    ("bought", "purchased"),
    ("buys", "purchases"),
    ("buy", "purchase"),
    ("altogether", "in total"),
    ("earns", "makes"),
)
# Counterfactual premises: number-free and, by construction, irrelevant to every quantity.
COUNTERFACTUAL_PREMISES = (
    "Suppose the story had taken place on a rainy day instead; the weather changes none of the quantities.",
    "Imagine all of this had happened a week later than described; the timing changes none of the numbers.",
    "Suppose the people in the story had different names; nothing else about the situation would change.",
    "Imagine the same events told from a neighbour's point of view; every amount stays exactly the same.",
)


def split_question(question: str) -> tuple[list[str], list[str]]:
    """Split a word problem into (fact sentences, question sentences); questions end with '?'.

    When no sentence ends with '?', the last sentence is taken as the question.
    """
    sentences = [s.strip() for s in _SENTENCE.split(question.strip()) if s.strip()]
    asks = [s for s in sentences if s.endswith("?")]
    if not asks:
        asks = sentences[-1:]
    facts = [s for s in sentences if s not in asks]
    return facts, asks


def _substitute(text: str) -> str:
    for old, new in _SYNONYMS:
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
        lower_old, lower_new = old[0].lower() + old[1:], new[0].lower() + new[1:]
        if lower_old != old:
            text = re.sub(rf"\b{re.escape(lower_old)}\b", lower_new, text)
    return text


def rephrase(question: str) -> str:
    """A′: a deterministic paraphrase — the question first, then the facts, with meaning-keeping synonyms."""
    facts, asks = split_question(question)
    ask = _substitute(" ".join(asks))
    if not facts:
        return f"Here is the question: {ask}"
    return f"Here is the question: {ask}\nWhat we know: {_substitute(' '.join(facts))}"


def counterfactual(question: str) -> str:
    """CF1: the question with a counterfactual, quantity-irrelevant premise inserted before what is asked.

    The premise is picked deterministically from :data:`COUNTERFACTUAL_PREMISES` by a checksum of the
    question, so the same question always gets the same CF1 variant; its answer must not change.
    """
    facts, asks = split_question(question)
    premise = COUNTERFACTUAL_PREMISES[zlib.crc32(question.encode()) % len(COUNTERFACTUAL_PREMISES)]
    return " ".join([*facts, premise, *asks])


def transform_question(question: str, transform: str) -> str:
    """Apply the arm's question transform by name."""
    if transform == "identity":
        return question
    if transform == "rephrase":
        return rephrase(question)
    if transform == "counterfactual":
        return counterfactual(question)
    raise ConfigError(f"unknown question transform {transform!r}; expected one of {TRANSFORMS}")


@dataclasses.dataclass(frozen=True)
class AnswerFormat:
    """How a prompt asks for the final answer and how the answer is found in a completion (the
    ``protocol`` of the coherence config). It changes only the wording around the question and the
    extraction, never the arms: ``seed`` is the pipeline's original instruction ('Answer: <number>'
    line, marked extraction); ``answer_line`` is the debate protocol that SmolLM2-135M can follow (a
    shorter instruction, one worked example before the question, lenient number extraction)."""

    instruction: str = ANSWER_INSTRUCTION
    example: tuple[str, str] | None = None  # (problem, worked solution) shown as a first exchange
    extraction: str = "marked"

    @classmethod
    def named(cls, protocol: str) -> AnswerFormat:
        if protocol == "seed":
            return cls()
        from jaxdebate.debate.answer_protocols import protocol_fields

        fields = protocol_fields(protocol)
        example = (fields["example_problem"], fields["example_solution"]) if fields.get("example_problem") else None
        return cls(fields["instruction"], example, fields.get("extraction", "marked"))

    def messages(self, question: str, system: str | None = None) -> list[dict[str, str]]:
        """System prompt (optional), the worked example (optional), then the question."""
        out = [{"role": "system", "content": system}] if system else []
        if self.example is not None:
            out += [{"role": "user", "content": f"{self.example[0]}\n\n{self.instruction}"},
                    {"role": "assistant", "content": self.example[1]}]
        return out + [{"role": "user", "content": f"{question}\n\n{self.instruction}"}]

    def extract(self, text: str | None) -> str | None:
        from jaxdebate.debate.answers import extract_answer

        return extract_answer(text, self.extraction)


SEED_FORMAT = AnswerFormat()


def arm_messages(arm: Arm, question: str, fmt: AnswerFormat = SEED_FORMAT) -> list[dict[str, str]]:
    """The chat messages an arm sends for a question: its persona as system prompt, the (transformed)
    question with the answer-format instruction as the user turn."""
    return fmt.messages(transform_question(question, arm.transform), system=PERSONAS[arm.persona])


def canonical_messages(question: str, fmt: AnswerFormat = SEED_FORMAT) -> list[dict[str, str]]:
    """The persona-free prompt used for DPO pairs and for evaluation (what the trained model must solve)."""
    return fmt.messages(question)


def arm_seed(arm: Arm, question_index: int) -> int:
    """The sampling seed of an arm on one question: the arm's seed mixed with the question's position,
    so an arm is reproducible yet its random draws differ between questions."""
    return (arm.seed * 1_000_003 + question_index) % (2**31 - 1)
