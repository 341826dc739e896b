"""Reward shaping: potential-based (gamma = the family's discount, the agreement potential: see
configs/arithmetic/base.py for why). Everything else comes from configs/arithmetic/base.py."""

from configs.arithmetic import base
from jaxdebate.shaping import ShapingConfig


def get_config():
    params = {"gamma": base.DISCOUNT, "potential_type": "agreement"}
    return base.get_config(shaping=ShapingConfig("potential_based", params))
