"""Shared settings of the arithmetic family: the seeds' experiment (configs/base.py) at CPU scale.

What changes from the seeds' family, and why:
- data: graded integer arithmetic, the four templates whose base pass rate at the training
  temperature lies in [0.1, 0.9] (``2+1``, ``2-1``, ``2+2``, ``2x1``: 0.18-0.34 at T=0.7, 4 samples;
  README "Training pool by template"; two-digit subtraction ``2-2`` at 0.095 and one-digit ``1x1`` at
  0.92 are left out: groups there rarely carry signal); 300 distinct problems are held out and never
  trained on;
- debate: the ``answer_line_debate`` protocol (round 1 as ``answer_line``: one worked example, an
  ``Answer: <number>`` line, lenient number extraction, instead of ``\\boxed{}``, which the 135M
  model cannot follow; later rounds quote only the other agents' final answers, which keeps the base
  model's 3x2 debate level with one agent where quoting whole responses halved round-2 accuracy;
  README "Base-model debate");
- sampling: T=0.7 for training (single-agent accuracy 0.27 vs 0.21 at T=1; the debate is not
  significantly below one agent there), through the vLLM CPU server in float32 where ``.venv-vllm``
  exists (``scripts/install_vllm.sh``), else the in-process JAX sampler (``sampler.fallback``, with a
  warning). Both decode in float32 and give the same greedy answers (all 900 step-0 validation rows of
  a run, bench/README "family_run"); the compiled server validated in 0.65x the JAX sampler's time on
  the Xeon AMX kind (the only kind measured with this family), ~0.75x of that again with the CPU
  server's 32-token KV blocks (``sampler.vllm.block_size``), and its seeded draws repeat run to run
  (every arm of a seed block samples the same first step). A run's training draws depend on which of
  the two sampled it (each has its own random stream): keep a sweep's seed block on one machine with
  one install;
- sizes: 48 new tokens per turn, sequences of at most 512 tokens, a 10x higher learning rate than
  the seeds' 3e-6 over 12 steps, so that a run fits about half an hour on 2 CPU cores.
Still 3 agents x 2 rounds, 4 debates per prompt, GRPO with the seeds' loss settings, except:

Credit assignment (the same for all five arms, so that each arm is a real credit-assignment
method; jaxdebate/shaping/REDUCTIONS.md has what each reduces to):
- ``shaping.credit="return"``, ``discount=0.99``: each turn is trained on the discounted sum of its
  agent's shaped rewards from that round on. A round-1 answer's value lies partly in the round-2
  debate it feeds, and potential-based shaping is policy-invariant only on returns: under per-turn
  credit, debate_length PBRS is correctness plus a fixed round bonus (-gamma/2, +1/2).
- ``loss.grouping="agent_round"``: a turn is compared only with the same agent's same-round turns of
  the other debates of its prompt, so round offsets are not trained on ("being in round 2" is no
  credit for an answer).
- potential_based uses ``gamma == discount`` and the ``agreement`` potential (how far the previous
  round agreed: a state the turn acts in). debate_length would collapse to identity under these
  settings (its r/R term is constant within an agent-round group); agreement gives the discounted
  return of correctness minus a state-dependent baseline, which differs from identity across
  debates. difference_rewards trains on the agent's marginal effect on the team's expected win (a
  tie shares its win), coma on its counterfactual advantage, reward_mixing on 0.5 correct + 0.5
  team, each summed over the agent's remaining rounds.
- ``loss.truncated_as_wrong=True`` with ``filter_truncated=False``: a turn that runs past its 48
  tokens counts as a wrong answer and is trained on, instead of being dropped (dropping let the
  completions drift longer: truncation rose from 0.2 to 0.4-0.7 in the first sweep).

Validation, as the experiment needs it: the 300 held-out problems single-agent greedy
(``val/single/``) and as a 3x2 debate greedy (``val/debate/``; the primary endpoint
``val/debate/accuracy/debate``) at step 0 (computed once per sweep and reused), mid-run and at the
end, and the templates never trained on single-agent at step 0 and the end
(``val/transfer/``); every validation writes its per-item rows to ``validation/step_<N>.jsonl``.
"""

from __future__ import annotations

import dataclasses

from configs import base as seeds
from jaxdebate.config import Config
from jaxdebate.debate.answer_protocols import with_protocol
from jaxdebate.shaping import ShapingConfig

GENERATIONS_PER_PROMPT = seeds.GENERATIONS_PER_PROMPT  # 4 debates per prompt, as in the seeds
TRAIN_DATA = "arithmetic:templates=2+1/2-1/2+2/2x1,n=2000,seed=0"
VALIDATION_SIZE = 300
PROTOCOL = "answer_line_debate"
TEMPERATURE = 0.7
MAX_SEQUENCE_LENGTH = 512
MAX_NEW_TOKENS = 48
TRAIN_BATCH_SIZE = 2
TOTAL_TRAIN_STEPS = 12
LEARNING_RATE = 3e-5
WARMUP_STEPS = 2
DISCOUNT = 0.99  # shaping.discount, and potential_based's gamma
VALIDATION_EVERY_STEPS = 6  # mid-run and the end
VALIDATION_ENVS = {"single": "math", "debate": "math_debate"}
TRANSFER_DATA = "arithmetic:templates=1+1/2-2/1x1/2+1-1/2+1x1,n=300,seed=11"  # the templates not trained on
EVAL_BATCH_SIZE = 100
# 4 packed rows of 512 per forward/backward (more are accumulated, same update): bounds the learner's
# memory (~10 GB without remat) on a 24 GiB machine; a step packs into 1-3 rows (identity seed 42)
MAX_TOKENS_PER_MICROBATCH = 2048
SAMPLER_BACKEND = "vllm"
SAMPLER_DTYPE = "float32"  # the JAX sampler's precision: the same greedy answers (bf16 changes 10-25%)
# the server compiled (torch.compile, cached across runs): a validation ~0.85x of the eager server's, the same
# answers; a start ~15 s longer, ~1 min the first time on a machine (bench/README "family_run")
SAMPLER_EAGER = False


def get_config(shaping: ShapingConfig | None = None) -> Config:
    """The family's shared config, with ``shaping`` (default: identity) as the only free section."""
    shaping = dataclasses.replace(shaping or ShapingConfig("identity", {}), credit="return", discount=DISCOUNT)
    c = seeds.get_config(shaping=shaping)
    return dataclasses.replace(
        c,
        model=dataclasses.replace(c.model, remat="none"),
        data=dataclasses.replace(c.data, train=TRAIN_DATA, validation_size=VALIDATION_SIZE,
                                 validation_envs=VALIDATION_ENVS, transfer=TRANSFER_DATA),
        loss=dataclasses.replace(c.loss, grouping="agent_round", filter_truncated=False, truncated_as_wrong=True),
        debate=with_protocol(dataclasses.replace(c.debate, max_sequence_length=MAX_SEQUENCE_LENGTH), PROTOCOL),
        sampler=dataclasses.replace(c.sampler, backend=SAMPLER_BACKEND, max_new_tokens=MAX_NEW_TOKENS,
                                    temperature=TEMPERATURE,
                                    vllm=dataclasses.replace(c.sampler.vllm, dtype=SAMPLER_DTYPE,
                                                             enforce_eager=SAMPLER_EAGER)),
        optimizer=dataclasses.replace(c.optimizer, peak_lr=LEARNING_RATE, end_lr=LEARNING_RATE,
                                      warmup_steps=WARMUP_STEPS, schedule="linear"),
        training=dataclasses.replace(
            c.training, train_batch_size=TRAIN_BATCH_SIZE, eval_batch_size=EVAL_BATCH_SIZE,
            total_train_steps=TOTAL_TRAIN_STEPS, validate_at_start=True,
            validation_every_steps=VALIDATION_EVERY_STEPS, checkpoint_every_steps=5, export_every_steps=1,
            hard_update_ref_every_steps=5, max_tokens_per_microbatch=MAX_TOKENS_PER_MICROBATCH,
        ),
    )
