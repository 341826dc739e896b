"""Checks of a run's data against its config that need the tokenizer but no model: done at start-up
and by ``launch --dry-run``, so a bad item stops the run before step 1, naming file:line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from jaxdebate.data.items import Item
from jaxdebate.debate.envs import DebateEnv, env_names, make_env, route
from jaxdebate.debate.fitting import check_first_prompts
from jaxdebate.errors import DataError
from jaxdebate.rl.validation_plan import plan

if TYPE_CHECKING:
    from jaxdebate.config import Config


def envs_for(items: Sequence[Item], config: Config, remap: Mapping[str, str] | None) -> list[DebateEnv]:
    """The environment that plays each item (one instance per environment name); a DataError naming
    the item and where it was read when its environment is not registered."""
    cache: dict[str, DebateEnv] = {}
    out = []
    for item in items:
        name = route(item.env, dict(remap or {}))
        if name not in cache:
            if name not in env_names():
                where = f"{item.origin} (item {item.id!r})" if item.origin else f"item {item.id!r}"
                # a remap target is checked with the config; what reaches here is the item's own env
                raise DataError(f"{where}: environment {name!r} is not registered; "
                                f"registered: {', '.join(env_names())}")
            cache[name] = make_env(name, config.debate)
        out.append(cache[name])
    return out


def check_prompts_fit(config: Config, tokenizer, train: Sequence[Item], validation: Sequence[Item],
                      transfer: Sequence[Item] = ()) -> int:
    """PromptTooLongError (a DataError) listing every training, validation or transfer item whose
    round-1 prompt, in each environment it is played in, exceeds
    ``debate.max_sequence_length - sampler.max_new_tokens``; returns that budget."""
    budget = config.debate.max_sequence_length - config.sampler.max_new_tokens
    items = [*train]
    envs = envs_for(train, config, config.data.env_name_remap)
    for vset in plan(config.data, validation, transfer, with_transfer=True):
        played = [it.with_env(vset.env) for it in vset.items] if vset.env else list(vset.items)
        items += played
        envs += envs_for(played, config, vset.remap)
    check_first_prompts(envs, items, tokenizer, budget)
    return budget
