"""Checks of a run's data against its config that need the tokenizer but no model: done at start-up
and by ``launch --dry-run``, so a bad item stops the run before step 1, naming file:line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from jaxdebate.data.items import Item
from jaxdebate.debate.envs import DebateEnv, make_env, route
from jaxdebate.debate.fitting import check_first_prompts

if TYPE_CHECKING:
    from jaxdebate.config import Config


def envs_for(items: Sequence[Item], config: Config, remap: Mapping[str, str] | None) -> list[DebateEnv]:
    """The environment that plays each item (one instance per environment name)."""
    cache: dict[str, DebateEnv] = {}
    out = []
    for item in items:
        name = route(item.env, dict(remap or {}))
        if name not in cache:
            cache[name] = make_env(name, config.debate)
        out.append(cache[name])
    return out


def check_prompts_fit(config: Config, tokenizer, train: Sequence[Item], validation: Sequence[Item]) -> int:
    """PromptTooLongError (a DataError) listing every training or validation item whose round-1
    prompt exceeds ``debate.max_sequence_length - sampler.max_new_tokens``; returns that budget."""
    budget = config.debate.max_sequence_length - config.sampler.max_new_tokens
    items = [*train]
    envs = envs_for(train, config, config.data.env_name_remap)
    if config.data.validation_env is not None:
        val = [it.with_env(config.data.validation_env) for it in validation]
        envs += envs_for(val, config, None)
    else:
        val = list(validation)
        envs += envs_for(val, config, config.data.env_name_remap)
    check_first_prompts(envs, [*items, *val], tokenizer, budget)
    return budget
