"""The debate environment: protocol, environments, prompts and grading of untrusted answers."""

from jaxdebate.debate.answers import extract_answer
from jaxdebate.debate.batch import DebateBatch, Turn, plurality_votes
from jaxdebate.debate.classes import GroupClasses, answer_classes_many, plurality
from jaxdebate.debate.config import DebateConfig
from jaxdebate.debate.envs import DebateEnv, env_names, make_env, register_env, route
from jaxdebate.debate.fitting import PromptTooLongError
from jaxdebate.debate.grading import Grader, GradingError
from jaxdebate.debate.protocol import debate_chunks, derive_seed, run_debates

__all__ = [
    "DebateBatch",
    "DebateConfig",
    "DebateEnv",
    "Grader",
    "GradingError",
    "GroupClasses",
    "PromptTooLongError",
    "Turn",
    "answer_classes_many",
    "debate_chunks",
    "derive_seed",
    "env_names",
    "extract_answer",
    "make_env",
    "plurality",
    "plurality_votes",
    "register_env",
    "route",
    "run_debates",
]
