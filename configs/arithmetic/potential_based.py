"""Reward shaping: potential-based (gamma 0.99, debate-length potential). Everything else comes
from configs/arithmetic/base.py."""

from configs.arithmetic import base
from jaxdebate.shaping import ShapingConfig


def get_config():
    params = {"gamma": 0.99, "potential_type": "debate_length"}
    return base.get_config(shaping=ShapingConfig("potential_based", params))
