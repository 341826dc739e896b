"""Coherence DPO on the bundled SmolLM2-135M-Instruct at CPU scale (issue 17): the graded arithmetic
of levels 2-3 (where the 135M model has real but incomplete skill) with the ``answer_line`` protocol,
100 training questions x 11 arms, DPO with LoRA, and 300 held-out problems of the same generation
(a disjoint slice). GSM8K-Platinum is a second evaluation in its own directory:

    python -m jaxdebate.coherence all --config configs/coherence_cpu.py
    python -m jaxdebate.coherence eval --config configs/coherence_cpu.py --set data.eval=gsm8k_platinum \\
        --set eval.dir=eval_gsm8k_platinum --set sampler.max_new_tokens=256
    python -m jaxdebate.coherence.results runs/coherence_cpu --out results/coherence
"""

from configs import coherence
from jaxdebate.configlib import apply_overrides

ARITHMETIC = "arithmetic:level=2..3,n=400,seed=21"


def get_config():
    return apply_overrides(coherence.get_config(), [
        "workdir=runs/coherence_cpu",
        "protocol=answer_line",
        f"data.train={ARITHMETIC},slice=0:100",
        "data.n_questions=100",
        f"data.eval={ARITHMETIC},slice=100:400",
        "sampler.max_new_tokens=48",
        "collect.questions_per_batch=8",
        "eval.batch_size=32",
    ])
