"""Precision pilot, arm ``fp32``: configs/arithmetic/identity.py as committed (vLLM server and learner in float32)."""

from configs.arithmetic import base


def get_config():
    return base.get_config()
