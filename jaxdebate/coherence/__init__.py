"""Coherence DPO (DESIGN §8): 11-arm rollouts → coherence scores → preference pairs → DPO with LoRA →
GSM8K-Platinum evaluation. Run a stage with ``python -m jaxdebate.coherence STAGE --config FILE``."""
