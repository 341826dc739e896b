"""Named answer protocols: how a turn asks for its answer and how the answer is found.

A protocol is a set of ``debate`` config fields (instruction wording, an optional worked example,
the extraction mode); it never changes what the agents or rounds are. ``boxed`` is the seeds'
protocol (the :class:`DebateConfig` defaults). ``answer_line`` suits small models on short numeric
tasks: one worked example ``3 + 4 = 7`` / ``Answer: 7`` and an explicit final-answer line, numbers
extracted leniently. SmolLM2-135M-Instruct (Q4_1 GGUF) answers 1 of 24 one-digit sums correctly with
``boxed`` and 22 of 24 with ``answer_line`` (greedy; README "Learning signal on a CPU").

``answer_line_debate`` keeps ``answer_line``'s round 1 and changes only the later rounds, where the
135M model copies and extends the other agents' sampled rambling when it sees their whole responses
(README "Base-model debate"): a later round quotes only each agent's final answer (its own first, as
``You``), asks for the result again with keeping a right answer as the default, and shows the worked
example in that layout (``3 + 4`` with previous answers 7, 8, 7 -> ``3 + 4 = 7`` / ``Answer: 7``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdebate.debate.config import DebateConfig
from jaxdebate.errors import ConfigError

# the DebateConfig fields a protocol may set; with_protocol resets the others to their defaults
_PROTOCOL_FIELDS = ("system_prompt", "instruction", "debate_intro", "debate_instruction",
                    "example_problem", "example_solution", "extraction", "quote", "debate_example_answers")
ANSWER_LINE_INSTRUCTION = "Give the result on the last line as: Answer: <number>"

PROTOCOLS: dict[str, dict[str, Any]] = {
    "boxed": {},
    "answer_line": {
        "instruction": ANSWER_LINE_INSTRUCTION,
        "debate_intro": "Other agents answered the same problem:",
        "debate_instruction": (
            "Check their answers and yours, then give your own result. " + ANSWER_LINE_INSTRUCTION
        ),
        "example_problem": "Compute $3 + 4$.",
        "example_solution": "3 + 4 = 7\nAnswer: 7",
        "extraction": "number",
    },
    "answer_line_debate": {
        "instruction": ANSWER_LINE_INSTRUCTION,
        "debate_intro": "Answers so far:",
        "debate_instruction": (
            "Compute it yourself. If an answer above is right, give it again. " + ANSWER_LINE_INSTRUCTION
        ),
        "example_problem": "Compute $3 + 4$.",
        "example_solution": "3 + 4 = 7\nAnswer: 7",
        "extraction": "number",
        "quote": "answer",
        "debate_example_answers": ("7", "8", "7"),
    },
}


def protocol_fields(name: str) -> dict[str, Any]:
    """The ``debate`` fields that protocol ``name`` sets."""
    if name not in PROTOCOLS:
        raise ConfigError(f"unknown answer protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    return dict(PROTOCOLS[name])


def with_protocol(config: DebateConfig, name: str) -> DebateConfig:
    """``config`` with the answer protocol ``name`` (its other fields unchanged)."""
    defaults = {f.name: f.default for f in dataclasses.fields(DebateConfig) if f.name in _PROTOCOL_FIELDS}
    return dataclasses.replace(config, **(defaults | protocol_fields(name)))

