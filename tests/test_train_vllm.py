"""The trainer with the vLLM backend (a real server process): weights synced every step, a server
killed mid-run is restarted from the latest exported weights without losing or repeating a step, and
the seeded draws repeat across server processes (common random numbers across arms)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from jaxdebate.configlib import load_config
from real_server import REAL_SERVER

pytestmark = REAL_SERVER

STEPS = 2  # the kill lands in step 2, which samples, syncs and validates on the restarted server


def test_server_killed_mid_run_the_run_finishes_with_every_step(tmp_path):
    from jaxdebate.train import Trainer

    config = load_config("configs/smoke.py", [
        # head_dim 64: vLLM's CPU attention needs >= 32 (the default tiny model has 16)
        "model.source=tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,seed=3",
        "sampler.backend=vllm", "sampler.fallback=error", "sampler.vllm.kv_cache_gib=1",
        "sampler.vllm.max_model_len=512", f"training.total_train_steps={STEPS}",
        # a greedy 3-agent debate validation on the restarted server at step 2, the last (issue 23 item 1)
        "training.export_every_steps=1", "training.validation_every_steps=2", "data.validation_size=2",
    ])
    trainer = Trainer(config, tmp_path / "run")
    metrics_file = tmp_path / "run" / "metrics.jsonl"
    killed: list[int] = []

    def kill_after_first_step() -> None:
        deadline = time.time() + 900
        while time.time() < deadline:
            if metrics_file.is_file() and metrics_file.read_text().count("\n") >= 1:
                server = trainer.sampler.server
                time.sleep(0.5)  # into step 2's sampling
                killed.append(server.pid)
                os.kill(server.pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_after_first_step, daemon=True)
    watcher.start()
    result = trainer.run()
    watcher.join(timeout=5)

    assert killed, "the server was never killed"
    assert result.status == "finished" and result.step == STEPS
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    train_steps = [r["step"] for r in rows if "train/accuracy" in r]
    assert train_steps == list(range(1, STEPS + 1))  # nothing lost, nothing repeated
    last = [r for r in rows if "train/accuracy" in r][-1]
    assert last["sampler/restarts"] >= 1
    assert all("sync/reload_s" in r for r in rows if "train/accuracy" in r)  # a sync every step
    assert all(r["weights/sampler_version"] == r["step"] for r in rows if "train/accuracy" in r)
    validated = [r for r in rows if "val/accuracy/debate" in r]
    assert [r["step"] for r in validated] == [2] and all(r["val/items"] == 2 for r in validated)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()) == ["2"]
    with pytest.raises(ProcessLookupError):  # the killed server's process group is gone
        os.killpg(killed[0], 0)


def test_two_arms_sample_the_same_first_step_on_the_server(tmp_path, monkeypatch):
    """Common random numbers through the server (the arithmetic family's sampler): with one seed and the
    same initial weights, two arms' first steps sample the same debates token for token, from two server
    processes; only the credit given to them differs. The JAX sampler's twin is test_sweep's
    ``test_the_arms_of_a_seed_block_sample_the_same_first_step``.

    The same holds on a sweep's shared server (``jaxdebate.sampling.vllm.shared``): the second arm runs
    on it, and then the first arm again, which samples, grades and credits as its own-server run did,
    although the server served another run before it."""
    import dataclasses

    from jaxdebate.metrics import read_metrics
    from jaxdebate.sampling.vllm.shared import ENV
    from jaxdebate.sweep_server import SweepServer
    from jaxdebate.shaping import ShapingConfig
    from jaxdebate.train import Trainer

    base = load_config("configs/smoke.py", [
        "model.source=tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,seed=3",
        "sampler.backend=vllm", "sampler.fallback=error", "sampler.vllm.dtype=float32",
        "sampler.vllm.enforce_eager=false",  # compiled, as the arithmetic family serves it
        "sampler.vllm.kv_cache_gib=1", "sampler.vllm.max_model_len=512", "training.total_train_steps=1",
    ])
    arms = {"potential_based": base, "identity": dataclasses.replace(base, shaping=ShapingConfig("identity", {}))}
    first = {}
    with SweepServer(tmp_path / "shared-server") as sweep_server:
        for name, config, shared in [("potential_based", base, False), ("identity", arms["identity"], True),
                                     ("potential_based_shared", base, True)]:
            if shared:
                monkeypatch.setenv(ENV, sweep_server.env_for(config)[ENV])
            assert Trainer(config, tmp_path / name).run().status == "finished"
            first[name] = next(r for r in read_metrics(tmp_path / name) if r.get("step") == 1)
            assert first[name]["sampler/shared_server"] == float(shared)
            assert (tmp_path / name / "vllm" / "server.log").is_file() != shared  # no server of its own
    fingerprints = {r["train/samples_fingerprint"] for r in first.values()}
    assert len(fingerprints) == 1 and first["identity"]["batch/completion_tokens"] > 0
    assert first["identity"]["train/accuracy"] == first["potential_based"]["train/accuracy"]
    shaped = {name: tuple(r[k] for k in sorted(r) if k.startswith("train/reward/shaped/")) for name, r in first.items()}
    assert len(set(shaped.values())) == 2  # the arms differ in the credit they give the same samples
    # the draws, their grades and the credit given to them, not the learner's figures: the server's
    # log-probs move by ~1e-9 between any two server processes, own or shared (vLLM batches concurrent
    # requests as they arrive), and the loss's importance weights with them
    same = [{k: v for k, v in first[name].items() if k.startswith(("train/", "batch/"))}
            for name in ("potential_based", "potential_based_shared")]
    assert len(same[0]) > 20 and same[0] == same[1]


def test_an_unsupported_head_dim_fails_once_before_any_server_starts(tmp_path):
    """Issue 23 item 5: vLLM's CPU attention has no kernel for head_dim 16; the server would start,
    die at its first request, and be restarted for nothing. The sampler refuses it up front."""
    from jaxdebate.errors import ConfigError
    from jaxdebate.train import Trainer

    config = load_config("configs/smoke.py", ["sampler.backend=vllm", "sampler.fallback=error",
                                              "training.total_train_steps=1"])
    start = time.time()
    with pytest.raises(ConfigError, match="head_dim=16 is not supported by vLLM's CPU attention"):
        Trainer(config, tmp_path / "run").run()
    assert time.time() - start < 120 and not (tmp_path / "run" / "vllm" / "server.log").exists()


def test_a_server_that_dies_the_same_way_after_a_restart_is_not_restarted_again(tmp_path, tiny_model, tokenizer):
    """The generic path behind item 5: an HF directory served as given (no preflight) with head_dim 16
    kills the engine at the first request; after one restart fails the same way, the error names the
    cause from the server log instead of vLLM's "EngineCore encountered an issue"."""
    from jaxdebate.errors import SamplerError
    from jaxdebate.model import export_hf
    from jaxdebate.sampling.base import SamplingParams
    from jaxdebate.sampling.vllm.config import VLLMConfig
    from jaxdebate.sampling.vllm.client import VLLMSampler

    params, model_config = tiny_model
    export_hf(params, model_config, tmp_path / "hf", tokenizer=tokenizer)
    cfg = VLLMConfig(dtype="float32", kv_cache_gib=1, max_model_len=256, max_restarts=3)
    with VLLMSampler.from_dir(tmp_path / "hf", workdir=tmp_path / "run", config=cfg) as sampler:
        with pytest.raises(SamplerError) as info:
            sampler.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_tokens=4))
        assert sampler.server.starts == 2  # the first start and one restart, not max_restarts
    message = str(info.value)
    assert "fails the same way after a restart" in message and "head_dim=16" in message
