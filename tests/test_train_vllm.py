"""The trainer with the vLLM backend (a real server process): weights synced every step, and a server
killed mid-run is restarted from the latest exported weights without losing or repeating a step."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from jaxdebate.config import load_config
from real_server import REAL_SERVER

pytestmark = REAL_SERVER

STEPS = 4


def test_server_killed_mid_run_the_run_finishes_with_every_step(tmp_path):
    from jaxdebate.rl.trainer import Trainer

    config = load_config("configs/smoke.py", [
        # head_dim 64: vLLM's CPU attention needs >= 32 (the default tiny model has 16)
        "model.source=tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,seed=3",
        "sampler.backend=vllm", "sampler.fallback=error", "sampler.vllm.kv_cache_gib=1",
        "sampler.vllm.max_model_len=512", f"training.total_train_steps={STEPS}",
        "training.export_every_steps=1", "training.validation_every_steps=100",
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
    with pytest.raises(ProcessLookupError):  # the killed server's process group is gone
        os.killpg(killed[0], 0)
