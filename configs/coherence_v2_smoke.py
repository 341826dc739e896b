"""Every stage of the v2 pipeline (issue 28) in about a minute on a tiny model: canonical twins into a
shared rollouts file, canonical pairs above the measured noise threshold, a third of the questions
held out, two epochs validated on them with early stopping (CI: tests/coherence/test_pipeline.py,
which points ``model.source`` at a tiny model that answers; see configs/coherence_smoke.py)."""

from configs import coherence_smoke
from jaxdebate.configlib import apply_overrides


def get_config():
    return apply_overrides(coherence_smoke.get_config(), [
        "workdir=runs/coherence_v2_smoke/dpo-seed42",
        "variant=dpo",
        "data.train=arithmetic:n=6,seed=0",
        "data.n_questions=6",
        "collect.canonical_twins=true",
        "collect.rollouts=runs/coherence_v2_smoke/rollouts.jsonl",
        "pairs.source=canonical",
        "pairs.gap_noise_z=2.0",
        "pairs.heldout_fraction=0.34",
        "pairs.max_correctness_pairs_per_question=2",
        "pairs.max_coherence_pairs_per_question=1",
        "dpo.epochs=2",
        "dpo.early_stopping=true",
        "dpo.patience=1",
    ])
