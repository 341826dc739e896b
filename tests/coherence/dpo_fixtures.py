"""The preference pairs and tiny-model config the coherence training tests share."""

from jaxdebate.coherence.config import CoherenceConfig, DPOConfig, LoraConfig
from jaxdebate.config import LoggingConfig, ModelConfig

PAIRS = [
    {"question": "What is 2+2?", "chosen": "2 plus 2 makes 4.\nAnswer: 4", "rejected": "I guess 5.\nAnswer: 5"},
    {"question": "What is 3+3?", "chosen": "3 plus 3 makes 6.\nAnswer: 6", "rejected": "Maybe 7.\nAnswer: 7"},
    {"question": "What is 1+4?", "chosen": "1 plus 4 makes 5.\nAnswer: 5", "rejected": "Hmm, 3.\nAnswer: 3"},
    {"question": "What is 5+2?", "chosen": "5 plus 2 makes 7.\nAnswer: 7", "rejected": "Likely 9.\nAnswer: 9"},
    {"question": "What is 6+1?", "chosen": "6 plus 1 makes 7.\nAnswer: 7", "rejected": "Say 8.\nAnswer: 8"},
]


def tiny_cfg(epochs=3, **dpo):
    settings = dict(learning_rate=5e-3, epochs=epochs, batch_size=2, grad_accumulation=2, schedule="constant",
                    length_bucket=64, max_length=128, beta=0.1)
    settings.update(dpo)
    return CoherenceConfig(
        model=ModelConfig(source="tiny"), lora=LoraConfig(rank=4, alpha=8.0),
        dpo=DPOConfig(**settings), logging=LoggingConfig(tensorboard=False, progress_bar=False),
    )
