"""The ``debate`` section of an experiment config: protocol shape and prompt wording."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxdebate.configlib import Section
from jaxdebate.debate.answers import EXTRACTION_MODES

DEFAULT_INSTRUCTION = "Solve the problem step by step. Put your final answer within \\boxed{}."
DEFAULT_DEBATE_INTRO = "These are the solutions to the problem from the other agents:"
DEFAULT_DEBATE_INSTRUCTION = (
    "Using the reasoning of the other agents as additional advice, examine your solution and theirs "
    "step by step and give an updated answer. Put your final answer within \\boxed{}."
)
DEFAULT_TRIM_MARKER = "[… {n} tokens trimmed …]"
QUOTE_MODES = ("full", "answer")


@dataclasses.dataclass(frozen=True)
class DebateConfig(Section):
    """``num_agents`` agents share one policy and debate for ``num_rounds`` rounds (DESIGN §3).

    Round 1 shows ``instruction`` after the problem; later rounds show the agent its own previous
    answer (``show_own_previous``) and the other agents' previous answers between ``debate_intro``
    and ``debate_instruction``, trimmed (tail kept, ``trim_marker`` in place of the cut) so that prompt
    plus ``max_tokens`` fit ``max_sequence_length``. ``system_prompt=None`` keeps the chat template's
    default. With ``early_stop_on_consensus`` a rollout ends after a round whose agents all agree.

    The answer protocol: ``example_problem``/``example_solution`` (both or neither) put one worked
    example before every turn's messages as an earlier user/assistant exchange; ``extraction`` is how
    a completion's final answer is found (``marked``: boxed or after a marker; ``number``: also the
    last number, see :func:`jaxdebate.debate.answers.extract_answer`). Named presets live in
    :mod:`jaxdebate.debate.answer_protocols`.

    ``quote`` is what a later round shows of the previous answers: ``full`` (the default) the whole
    responses, the agent's own as its earlier chat turn; ``answer`` only each agent's extracted final
    answer, one line per agent (its own first, as ``You``, with ``show_own_previous``) inside a single
    user message with the problem, so that a small model sees a short prompt shaped like round 1's
    instead of other agents' rambling text. ``debate_example_answers`` (``answer`` quoting only)
    replaces the round-1 worked example in later rounds by one in the later-round layout: the example
    problem with these previous answers (own first) and ``example_solution`` as the reply.
    """

    _name: ClassVar[str] = "debate"
    num_agents: int = 3
    num_rounds: int = 2
    early_stop_on_consensus: bool = False
    max_sequence_length: int = 2048
    system_prompt: str | None = None
    instruction: str = DEFAULT_INSTRUCTION
    debate_intro: str = DEFAULT_DEBATE_INTRO
    debate_instruction: str = DEFAULT_DEBATE_INSTRUCTION
    show_own_previous: bool = True
    trim_marker: str = DEFAULT_TRIM_MARKER
    example_problem: str | None = None
    example_solution: str | None = None
    extraction: str = "marked"
    quote: str = "full"
    debate_example_answers: tuple[str, ...] | None = None

    def validate(self) -> None:
        self._at_least(1, "num_agents", "num_rounds")
        self._at_least(32, "max_sequence_length")
        self._non_blank("instruction", "debate_intro", "debate_instruction", "trim_marker",
                        "system_prompt", "example_problem", "example_solution")
        if (self.example_problem is None) != (self.example_solution is None):
            self._fail("example_solution", "must be set together with example_problem (both or neither)")
        if self.quote not in QUOTE_MODES:
            self._fail("quote", f"must be one of {', '.join(QUOTE_MODES)}")
        if self.debate_example_answers is not None:
            if self.quote != "answer":
                self._fail("debate_example_answers", "needs quote='answer' (the layout it is written in)")
            if self.example_problem is None:
                self._fail("debate_example_answers", "needs example_problem and example_solution")
            if not self.debate_example_answers or any(not str(a).strip() for a in self.debate_example_answers):
                self._fail("debate_example_answers", "must be a non-empty list of non-blank answers")
        if self.extraction not in EXTRACTION_MODES:
            self._fail("extraction", f"must be one of {', '.join(EXTRACTION_MODES)}")
        try:
            self.trim_marker.format(n=1)
        except (KeyError, IndexError, ValueError) as e:
            self._fail("trim_marker", f"may only use the placeholder {{n}} ({e})")
