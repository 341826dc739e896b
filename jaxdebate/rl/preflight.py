"""Checks of a run's data against its config that need the tokenizer but no model: done at start-up
and by ``launch --dry-run``, so a bad item stops the run before step 1, naming file:line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jaxdebate.data.items import Item
from jaxdebate.debate.envs import envs_for
from jaxdebate.debate.fitting import check_first_prompts
from jaxdebate.rl.validation_plan import plan

if TYPE_CHECKING:
    from jaxdebate.config import Config


def check_prompts_fit(config: Config, tokenizer, train: Sequence[Item], validation: Sequence[Item],
                      transfer: Sequence[Item] = ()) -> int:
    """PromptTooLongError (a DataError) listing every training, validation or transfer item whose
    round-1 prompt, in each environment it is played in, exceeds
    ``debate.max_sequence_length - sampler.max_new_tokens``; returns that budget."""
    budget = config.debate.max_sequence_length - config.sampler.max_new_tokens
    items = [*train]
    envs = envs_for(train, config.debate, config.data.env_name_remap)
    for vset in plan(config.data, validation, transfer, with_transfer=True):
        played = [it.with_env(vset.env) for it in vset.items] if vset.env else list(vset.items)
        items += played
        envs += envs_for(played, config.debate, vset.remap)
    check_first_prompts(envs, items, tokenizer, budget)
    return budget
