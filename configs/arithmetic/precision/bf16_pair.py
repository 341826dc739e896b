"""Precision pilot, arm ``bf16_pair``: configs/arithmetic/identity.py with both sides of the sampler/learner pair
rounding to bfloat16.

The vLLM server holds and is synced bf16 weights (``sampler.vllm.dtype``), and the learner's layer matmuls take bf16
operands with float32 accumulation (``model.dot_dtype``); parameters, optimiser and loss stay float32. Rounding on one
side only lets the learner drift from its sampler after the first update (bench/README "bf16 dots: a faster step, and
a learner that drifts from its sampler"); rounding on both kept the mismatch flat there. Validation runs on the same
bf16 server, so this arm's step 0 is its own.
"""

import dataclasses

from configs.arithmetic import base


def get_config():
    c = base.get_config()
    return dataclasses.replace(
        c,
        model=dataclasses.replace(c.model, dot_dtype="bfloat16"),
        sampler=dataclasses.replace(c.sampler, vllm=dataclasses.replace(c.sampler.vllm, dtype="bfloat16")),
    )
