"""Debate environments and their registry.

An environment fixes how many agents and rounds an item gets and writes the chat messages of each
turn. ``math`` is one agent answering once; ``math_debate`` is the DESIGN §3 debate. Register more with
``@register_env("name")`` on a factory ``(DebateConfig) -> DebateEnv`` (subclass to change prompts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from jaxdebate.data.items import Item
from jaxdebate.debate.answers import extract_answer
from jaxdebate.debate.config import DebateConfig
from jaxdebate.errors import ConfigError, DataError

Message = dict[str, str]


@dataclasses.dataclass(frozen=True)
class DebateEnv:
    """``num_agents`` agents, ``num_rounds`` rounds, and the messages of each turn."""

    name: str
    num_agents: int
    num_rounds: int
    config: DebateConfig

    def _with_system(self, messages: list[Message]) -> list[Message]:
        """The system prompt and the worked example (when configured) before ``messages``."""
        cfg = self.config
        if cfg.example_problem is not None:
            messages = [
                {"role": "user", "content": f"{cfg.example_problem}\n\n{cfg.instruction}"},
                {"role": "assistant", "content": cfg.example_solution},
                *messages,
            ]
        if cfg.system_prompt is not None:
            return [{"role": "system", "content": cfg.system_prompt}, *messages]
        return messages

    def first_messages(self, item: Item) -> list[Message]:
        """Round 1: the problem and the answer-format instruction."""
        return self._with_system([{"role": "user", "content": f"{item.problem}\n\n{self.config.instruction}"}])

    def debate_messages(self, item: Item, own_previous: str | None, others: Sequence[tuple[int, str]]) -> list[Message]:
        """Round r > 1: the agent's previous answer (optional) and the others' previous answers.

        ``others`` holds (agent index, previous response text), already trimmed to fit.
        With ``quote="answer"`` only their extracted final answers are shown (:meth:`_answer_messages`).
        """
        cfg = self.config
        if cfg.quote == "answer":
            return self._answer_messages(item, own_previous, others)
        shared = "\n\n".join(f"Agent {j + 1}'s solution:\n{text.strip()}" for j, text in others)
        debate = f"{cfg.debate_intro}\n\n{shared}\n\n{cfg.debate_instruction}"
        if cfg.show_own_previous and own_previous is not None:
            return self._with_system([
                {"role": "user", "content": f"{item.problem}\n\n{cfg.instruction}"},
                {"role": "assistant", "content": own_previous.strip()},
                {"role": "user", "content": debate},
            ])
        return self._with_system([{"role": "user", "content": f"{item.problem}\n\n{debate}"}])

    def _answer_block(self, problem: str, own: list[str | None], others: Sequence[tuple[int, str | None]]) -> str:
        """The problem, the intro, ``You: 7`` (when ``own`` holds the agent's answer) and ``Agent 2: 8``
        lines (``no answer`` where an agent stated none), then the debate instruction."""
        cfg = self.config
        rows = [("You", answer) for answer in own] + [(f"Agent {j + 1}", answer) for j, answer in others]
        lines = "\n".join(f"{who}: {answer if answer is not None else 'no answer'}" for who, answer in rows)
        return f"{problem}\n\n{cfg.debate_intro}\n{lines}\n\n{cfg.debate_instruction}"

    def _answer_messages(self, item: Item, own_previous: str | None,
                         others: Sequence[tuple[int, str]]) -> list[Message]:
        """A later round that quotes answers only: one user message with the problem, the intro, one
        line per previous answer (the agent's own first, with ``show_own_previous``) and the debate
        instruction; before it the worked example in the same layout when ``debate_example_answers``
        is set, else the round-1 example.

        A small model copes with a prompt shaped like round 1's; whole quoted responses (and its own
        as an earlier chat turn) make it continue their rambling instead of answering.
        """
        cfg = self.config
        show_own = cfg.show_own_previous and own_previous is not None
        own = [extract_answer(own_previous, cfg.extraction)] if show_own else []
        quoted = [(j, extract_answer(text, cfg.extraction)) for j, text in others]
        messages = [{"role": "user", "content": self._answer_block(item.problem, own, quoted)}]
        if cfg.debate_example_answers is None:
            return self._with_system(messages)
        example = list(cfg.debate_example_answers)
        example_own = example[:1] if cfg.show_own_previous else []
        example_others = list(enumerate(example[len(example_own):], start=1))
        shot = [
            {"role": "user", "content": self._answer_block(cfg.example_problem, example_own, example_others)},
            {"role": "assistant", "content": cfg.example_solution},
        ]
        system = [] if cfg.system_prompt is None else [{"role": "system", "content": cfg.system_prompt}]
        return [*system, *shot, *messages]


_REGISTRY: dict[str, Callable[[DebateConfig], DebateEnv]] = {}


def register_env(name: str) -> Callable[[Callable[[DebateConfig], DebateEnv]], Callable[[DebateConfig], DebateEnv]]:
    """Decorator registering an environment factory under ``name``."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"environment name must be a non-empty string, got {name!r}")

    def decorate(factory: Callable[[DebateConfig], DebateEnv]) -> Callable[[DebateConfig], DebateEnv]:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ConfigError(f"environment {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorate


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def make_env(name: str, config: DebateConfig) -> DebateEnv:
    if name not in _REGISTRY:
        raise DataError(f"environment {name!r} is not registered; registered: {', '.join(env_names())}")
    env = _REGISTRY[name](config)
    if env.num_agents < 1 or env.num_rounds < 1:
        raise ConfigError(f"environment {name!r} has {env.num_agents} agents and {env.num_rounds} rounds; need >= 1 each")
    return env


def route(item_env: str, env_name_remap: dict[str, str] | None) -> str:
    """The environment that plays an item: its ``env`` after ``env_name_remap``."""
    return (env_name_remap or {}).get(item_env, item_env)


def envs_for(items: Sequence[Item], config: DebateConfig, env_name_remap: Mapping[str, str] | None = None
             ) -> list[DebateEnv]:
    """The environment that plays each item (one instance per name); an unregistered one is a DataError
    naming the item, where it was read and, when remapped, its own ``env``."""
    remap = dict(env_name_remap or {})
    cache: dict[str, DebateEnv] = {}
    out = []
    for item in items:
        name = route(item.env, remap)
        if name not in cache:
            try:
                cache[name] = make_env(name, config)
            except DataError as err:
                remapped = f" (env {item.env!r} remapped)" if name != item.env else ""
                raise DataError(f"{item.where}{remapped}: {err}") from None
        out.append(cache[name])
    return out


@register_env("math")
def _math(config: DebateConfig) -> DebateEnv:
    return DebateEnv("math", 1, 1, config)


@register_env("math_debate")
def _math_debate(config: DebateConfig) -> DebateEnv:
    return DebateEnv("math_debate", config.num_agents, config.num_rounds, config)
