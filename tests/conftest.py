"""Shared fixtures: a tiny random Llama, the SmolLM2 tokenizer, the bundled SmolLM2, a scratch dir."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model():
    """``(params, config)`` of the default ``tiny`` source: 2 layers, hidden 64, 4 heads / 2 KV heads,
    SmolLM2's 49152-token vocabulary, tied embeddings, float32."""
    from jaxdebate.model import load

    return load("tiny")


@pytest.fixture(scope="session")
def tokenizer():
    """The SmolLM2 tokenizer (what ``tiny`` and ``smollm2`` models use), chat template included."""
    from jaxdebate.model import load_tokenizer

    return load_tokenizer("tiny")


@pytest.fixture(scope="session")
def smollm2():
    """``(params, config)`` of the bundled SmolLM2-135M-Instruct (tests using it: mark ``smollm2``)."""
    from jaxdebate.model import load

    return load("smollm2")


@pytest.fixture
def tmp(tmp_path):
    """A fresh scratch directory (``pathlib.Path``) for one test."""
    return tmp_path
