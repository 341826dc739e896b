"""Shared fixtures: a tiny random Llama, the SmolLM2 tokenizer, the bundled SmolLM2, a scratch dir."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config):
    """Each xdist worker gets a core of its own (``worker_cores``), before JAX starts its threads.

    The tests build many short training runs (smoke runs, resume, sweep, in this process and in
    subprocesses) that compile the same tiny-model programs, and each new sampler or learner jits its
    functions afresh: all of them share one XLA persistent compilation cache for this session (what
    it saves: bench/README "The test suite's time"). Compile-count checks stay meaningful: JAX reports a cache
    hit as a backend compile too, and ``_cache_size`` counts traces."""
    from worker_cores import pin_worker

    pin_worker()
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        cache = tempfile.mkdtemp(prefix="jaxdebate-tests-xla-")
        config._jaxdebate_xla_cache = cache
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
    # in-process trainers do not go through the launcher: give them and their subprocesses its threshold
    from jaxdebate.launch import CACHE_MIN_COMPILE_S

    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(CACHE_MIN_COMPILE_S))
    # The launcher's huge pages paid off in the 135M learner bench (8 x 512); on the tiny test models they
    # cost more kernel time than the page faults they save (a smoke launch 20 s with them, 12 s
    # without: bench/README "The test suite's time"). Subprocess launches here run with glibc's defaults;
    # tests/test_train_smoke.py and tests/test_host_memory.py still run the launcher's default.
    os.environ.setdefault("JAXDEBATE_HUGEPAGES", "0")


# The suite's longest files (``--durations``), begun first. xdist's ``loadfile`` hands out files by their
# number of tests unless ``--no-loadscope-reorder`` (pyproject addopts), which put these few-test, long
# files last, one worker running them while the other idled; longest first keeps both busy to the end.
LONGEST_FIRST = (
    "tests/test_train_vllm.py",
    "tests/sampling/vllm/test_client.py",
    "tests/test_distributed.py",
    "tests/test_sweep.py",
    "tests/rl/test_debate_source.py",
    "tests/rl/test_validation_rows.py",
    "tests/coherence/test_pipeline.py",
    "tests/test_train_resume.py",
    "tests/sampling/vllm/test_remote.py",
    "tests/test_arithmetic_family.py",
    # one or two long tests each; collected last (top-level files), they used to start after the rest
    "tests/test_train_smoke.py",
    "tests/test_lora_grpo.py",
    "tests/test_run_guards.py",
    "tests/test_eval.py",
    "tests/model/test_llama.py",
    "tests/rl/test_batching.py",
    "tests/sampling/test_jax_sampler.py",
)


def pytest_collection_modifyitems(config, items):
    """Run :data:`LONGEST_FIRST` before the rest; the order inside a file is kept (module fixtures)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_unconfigure(config):
    cache = getattr(config, "_jaxdebate_xla_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


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
