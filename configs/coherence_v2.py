"""Coherence DPO v2 (issue 28) on the bundled SmolLM2-135M-Instruct at CPU scale: on-policy pairs,
a measured coherence threshold, held-out questions, per-epoch validation and early stopping.

500 questions of graded arithmetic (levels 2-3) are collected once into a shared rollouts file, every
arm also re-sampled under the canonical prompt (``collect.canonical_twins``); pairs are made of those
canonical twins, a coherence pair needs a gap above twice the measured noise of the quality score,
and 20% of the questions (100) are held out by question: ~400 training questions. Each epoch is
validated on the held-out pairs and with greedy accuracy on the held-out questions; training stops
after one epoch without a better held-out accuracy and exports the best epoch. Evaluation: 300
problems of the same generator (a disjoint slice).

Every stage samples with the in-process JAX sampler in the model's fp32 (pinned, not ``auto``, which
picks vLLM in bf16 on some CPUs and JAX in fp32 on others): the same backend and precision on every
machine. Answers record their decoder with the CPU kind, and an evaluation made on another kind is
recomputed, never reused. The rollouts are collected once and committed (``scripts/coherence_v2.py``).

Variants share the rollouts and differ only in :data:`VARIANTS`' overrides (one ``--set`` each);
the seed is ``dpo.seed`` (adapter initialisation and pair order)::

    python -m jaxdebate.coherence all --config configs/coherence_v2.py   # collects, then dpo at seed 1
    python -m jaxdebate.coherence all --config configs/coherence_v2.py --workdir runs/coherence_v2/sft-seed1 \\
        --set variant=sft --set dpo.seed=1 --set dpo.objective=sft
    python -m jaxdebate.coherence.report runs/coherence_v2 --out results/coherence-v2
"""

from configs import coherence
from jaxdebate.configlib import apply_overrides

ARITHMETIC = "arithmetic:level=2..3,n=800,seed=21"
ROOT = "runs/coherence_v2"
ROLLOUTS = f"{ROOT}/rollouts.jsonl"  # shared by every variant; scripts/coherence_v2.py keeps it in git

# name -> the overrides that make the variant (on top of get_config()); same questions, same pairs
# where the kind allows, same seeds.
VARIANTS: dict[str, list[str]] = {
    "dpo": [],
    "sft": ["dpo.objective=sft"],
    "rpo": ["dpo.objective=rpo", "dpo.rpo_alpha=1.0"],
    "dpo-correctness": ["pairs.kind=correctness"],
    "dpo-coherence": ["pairs.kind=coherence"],
    "dpo-beta0.3": ["dpo.beta=0.3"],
    "dpo-1epoch": ["dpo.epochs=1", "dpo.early_stopping=false"],
    "dpo-3epochs": ["dpo.epochs=3", "dpo.early_stopping=false"],
}


def get_config():
    return apply_overrides(coherence.get_config(), [
        f"workdir={ROOT}/dpo-seed1",  # the driver's dpo run at seed 1 (scripts/coherence_v2.py)
        "variant=dpo",
        "dpo.seed=1",
        "protocol=answer_line",
        f"data.train={ARITHMETIC},slice=0:500",
        "data.n_questions=500",
        f"data.eval={ARITHMETIC},slice=500:800",
        "sampler.max_new_tokens=48",
        # one backend and precision on every machine: the study spans sessions and CPU kinds, and
        # `auto` picks vLLM in bf16 on AVX-512 bf16 CPUs and the JAX sampler in fp32 elsewhere
        "sampler.backend=jax",
        "collect.questions_per_batch=8",
        "collect.canonical_twins=true",
        f"collect.rollouts={ROLLOUTS}",
        "pairs.source=canonical",
        "pairs.gap_noise_z=2.0",
        "pairs.heldout_fraction=0.2",
        "dpo.epochs=3",
        "dpo.early_stopping=true",
        "dpo.patience=1",
        "eval.batch_size=32",
    ])
