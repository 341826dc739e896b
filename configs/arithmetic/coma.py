"""Reward shaping: COMA counterfactual advantage. Everything else comes from configs/arithmetic/base.py.

``n_rollouts_per_prompt`` must equal ``training.generations_per_prompt`` (checked when built).
"""

from configs.arithmetic import base
from jaxdebate.shaping import ShapingConfig


def get_config():
    params = {"n_rollouts_per_prompt": base.GENERATIONS_PER_PROMPT}
    return base.get_config(shaping=ShapingConfig("coma_advantage", params))
