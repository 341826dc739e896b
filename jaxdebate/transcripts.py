"""Readable debates sampled from a trained run: restore its policy, play one held-out problem."""

from __future__ import annotations

from pathlib import Path

from jaxdebate.checkpoint import load_policy
from jaxdebate.debate import Grader, run_debates
from jaxdebate.sampling.base import SamplingParams
from jaxdebate.sampling.jax_sampler import JaxSampler


def sample_transcript(workdir: str | Path, *, step: int | None = None, item: int = 0,
                      temperature: float | None = None, seed: int = 0) -> str:
    """Restore a run's policy from its orbax checkpoint and debate one held-out problem with it.

    Uses the run's own config (agents, rounds, prompt, max tokens) and the in-process JAX sampler;
    ``temperature`` defaults to the run's evaluation temperature. Returns the readable transcript.
    """
    params, llama, tokenizer, config = load_policy(workdir, step)
    train, val = config.data.load()
    pool = val or train
    chosen = pool[item % len(pool)]
    sampler = JaxSampler(params, llama, tokenizer, max_total_len=config.debate.max_sequence_length)
    grader = Grader()
    try:
        t = config.sampler.eval_temperature if temperature is None else temperature
        batch = run_debates(
            sampler, tokenizer, [chosen], config=config.debate, n_rollouts=1,
            sampling=SamplingParams(temperature=t, max_tokens=config.sampler.max_new_tokens, seed=seed),
            grader=grader, env_name_remap=config.data.env_name_remap, seed=seed,
        )
    finally:
        grader.close()
        sampler.close()
    return batch.transcript(0, 0)
