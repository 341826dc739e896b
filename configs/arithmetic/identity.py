"""Reward shaping: identity. Everything else comes from configs/arithmetic/base.py."""

from configs.arithmetic import base
from jaxdebate.shaping import ShapingConfig


def get_config():
    return base.get_config(shaping=ShapingConfig("identity", {}))
