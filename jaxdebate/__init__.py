"""jaxdebate: RL for language models in multi-agent debate."""
