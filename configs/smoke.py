"""A few steps of the whole pipeline on a tiny random model and built-in arithmetic problems.

For tests, CI and a quick look (``python -m jaxdebate.launch --config configs/smoke.py``). A random
model answers nothing correctly, so the filters are off and the shaping is potential-based: its
per-round potential differences give non-zero advantages, so the update really moves the weights.
"""

from configs import base
from jaxdebate.configlib import apply_overrides
from jaxdebate.shaping import ShapingConfig


def get_config():
    shaping = ShapingConfig("potential_based", {"gamma": 0.99, "potential_type": "debate_length"})
    return apply_overrides(base.get_config(shaping=shaping), [
        "model.source=tiny",
        "model.remat=none",
        "data.train=arithmetic:n=48,seed=0",
        "data.validation_size=4",
        "debate.max_sequence_length=320",
        "sampler.backend=jax",
        "sampler.max_new_tokens=16",
        "loss.filter_truncated=false",
        "loss.filter_zero_signal=false",
        "optimizer.peak_lr=1e-4",
        "optimizer.end_lr=1e-5",
        "optimizer.warmup_steps=1",
        "optimizer.schedule=linear",
        "training.total_train_steps=4",
        "training.validation_every_steps=2",
        "training.checkpoint_every_steps=2",
        "training.export_every_steps=2",
        "training.hard_update_ref_every_steps=2",
        "training.max_tokens_per_microbatch=8192",
    ])
