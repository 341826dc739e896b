"""Every stage of the coherence pipeline in about a minute: a tiny model, 4 built-in arithmetic
questions, 16-token completions, one DPO epoch (at a learning rate high enough to move a tiny model),
4 evaluation items (for CI and a quick look).

A random ``tiny`` model never writes ``Answer: …``, so every trajectory is incorrect and the pairs
stage finds nothing to train on; point ``model.source`` at a small model that answers in that format
(tests/coherence/test_pipeline.py builds a tiny one for this).
"""

from configs import coherence
from jaxdebate.configlib import apply_overrides


def get_config():
    return apply_overrides(coherence.get_config(), [
        "workdir=runs/coherence_smoke",
        "model.source=tiny",
        "data.train=arithmetic:n=4,seed=0",
        "data.n_questions=4",
        "data.eval=arithmetic:n=4,seed=1",
        "sampler.backend=jax",  # a tiny model: no server start-up on any machine
        "sampler.max_new_tokens=16",
        "collect.questions_per_batch=2",
        "dpo.epochs=1",
        "dpo.learning_rate=5e-3",
        "dpo.max_length=256",
        "lora.rank=4",
        "lora.alpha=8.0",
        "eval.batch_size=4",
        "logging.tensorboard=false",
    ])
