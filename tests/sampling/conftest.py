"""The in-process sampler tests' model: a tiny untied Llama peakier than HF's 0.02 init, so greedy
paths differ between prompts, and a JaxSampler over it (one per test module)."""

import pytest

from jaxdebate.model import load
from jaxdebate.sampling import JaxSampler

SOURCE = "tiny:std=0.1,tie=false"


@pytest.fixture(scope="module")
def model():
    return load(SOURCE)


@pytest.fixture(scope="module")
def sampler(model, tokenizer):
    params, config = model
    with JaxSampler(params, config, tokenizer) as s:
        yield s
