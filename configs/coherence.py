"""Coherence DPO on the bundled SmolLM2-135M-Instruct (DESIGN §8): 500 GSM8K-train questions × 11 arms,
preference pairs, DPO with LoRA (lr 5e-5, 3 epochs, batch 2, accumulation 2), GSM8K-Platinum evaluation.

    python -m jaxdebate.coherence all --config configs/coherence.py --workdir runs/coherence
"""

from jaxdebate.coherence.config import CoherenceConfig


def get_config() -> CoherenceConfig:
    return CoherenceConfig()
