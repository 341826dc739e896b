"""Experiment configs: each module exposes ``get_config() -> jaxdebate.config.Config``.

``base.py`` holds every shared value; the five strategy configs change only the shaping section.
Run one with ``python -m jaxdebate.launch --config configs/coma.py``.
"""
