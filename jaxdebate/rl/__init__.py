"""The RL learner (DESIGN §5): policy loss, micro-batching, the jitted GRPO/RLOO update and the
array work of a step (``rl.step``). ``jaxdebate.train`` (the trainer loop) runs experiments with
them; the pieces are pure and usable on their own (tests/rl/test_learning.py has a loop without the
debate env).
"""

from jaxdebate.rl.batching import Sample, length_buckets, make_microbatches, possible_shapes
from jaxdebate.rl.grpo import Learner, TrainState
from jaxdebate.rl.optim import lr_schedule, make_optimizer
from jaxdebate.rl.losses import loss_terms, policy_loss, token_weights

__all__ = [
    "Learner",
    "Sample",
    "TrainState",
    "length_buckets",
    "loss_terms",
    "lr_schedule",
    "make_microbatches",
    "make_optimizer",
    "policy_loss",
    "possible_shapes",
    "token_weights",
]
