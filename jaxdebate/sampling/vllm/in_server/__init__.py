"""Modules that run inside the vLLM server's virtualenv, not the trainer's: the request guard, the
weight-upload endpoint and the worker extension that reloads weights in place. ``server`` copies
each file onto the server's ``PYTHONPATH`` under its ``MODULE_NAME``, so a module here may import
only the standard library, vLLM and vLLM's own dependencies (torch, safetensors;
``tests/test_architecture.py`` enforces it) — not jaxdebate, and a sibling only by its
``MODULE_NAME``."""
