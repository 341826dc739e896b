"""configs/smoke.py end to end through `python -m jaxdebate.launch`: checkpoints, JSONL with the
per-step metrics of the issue, TensorBoard events, validation, restore and HF export of a checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxdebate.checkpoint import export_checkpoint, load_policy, restore
from jaxdebate.checkpointer import Checkpointer
from jaxdebate.configlib import load_config
from jaxdebate.errors import RunError
from jaxdebate.metrics import read_metrics
from jaxdebate.train import train

ROOT = Path(__file__).resolve().parents[1]

PER_STEP = [
    "train/reward/raw/mean", "train/reward/shaped/mean", "train/reward/raw/agent_0", "train/reward/shaped/agent_2",
    "train/reward/raw/round_0", "train/reward/shaped/round_1", "train/accuracy", "train/accuracy/team",
    "train/zero_advantage_fraction", "train/truncated_fraction", "learner/kl", "learner/entropy",
    "learner/clip_fraction", "learner/grad_norm", "learner/lr", "learner/logprob_abs_mismatch",
    "throughput/tokens_per_s", "time/sampling", "time/learning", "time/compile",
]


@pytest.mark.slow
def test_smoke_run_via_cli(tmp_path):
    workdir = tmp_path / "smoke"
    # as a user runs it: no compilation-cache or huge-page setting of ours, so the launcher's defaults apply
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != "JAXDEBATE_HUGEPAGES"}
    env["JAXDEBATE_CACHE"] = str(tmp_path / "cache")
    out = subprocess.run([sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir",
                          str(workdir), "--set", "logging.progress_bar=false"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "finished at step 4" in out.stderr
    # the launcher re-executed itself once with glibc's huge-page tunable (host_memory)
    assert out.stderr.count("host memory: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages:") == 1
    # compiled programs persist for the next run (how many take the launcher's minimum compile time of
    # 0.5 s varies by machine: 13 on an idle Zen 4, 7 there at JAX's default of 1 s)
    cached = [p.name for p in (tmp_path / "cache" / "xla").iterdir()]
    assert any(name.startswith("jit_") for name in cached), cached

    records = read_metrics(workdir)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for record in records:
        missing = [k for k in PER_STEP if k not in record]
        assert not missing, f"step {record['step']} lacks {missing}"
        assert record["learner/updated"] == 1.0 and record["batch/samples"] == 48
    assert records[0]["learner/kl"] == 0.0  # policy == reference at the first step
    assert any(r["learner/grad_norm"] > 0 for r in records)
    assert records[1]["time/sync"] >= 0 and records[1]["weights/sampler_version"] == 2
    for r in (records[1], records[3]):
        assert 0 <= r["val/accuracy/debate"] <= 1 and "val/accuracy/agent_2" in r and "val/accuracy/round_1" in r
    events = list((workdir / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 1000

    with Checkpointer(workdir / "checkpoints") as ckpt:
        assert ckpt.all_steps() == [2, 4]

    # starting over where checkpoints exist is refused (from the CLI and the Python API), touching nothing:
    # a fresh run there would skip saving every step the old run has on disk
    again = subprocess.run([sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir",
                            str(workdir), "--set", "logging.progress_bar=false", "checkpoint.resume=false"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "holds a checkpoint (step 4) and checkpoint.resume is false: use another workdir" in again.stderr
    with pytest.raises(RunError, match="newest step 4.*move its checkpoints/ aside"):
        train(load_config("configs/smoke.py", ["checkpoint.resume=false"]), workdir)
    assert [r["step"] for r in read_metrics(workdir)] == [1, 2, 3, 4]
    with Checkpointer(workdir / "checkpoints") as ckpt:
        assert ckpt.all_steps() == [2, 4]
    params, config = restore(workdir)
    assert config == load_config("configs/smoke.py", ["logging.progress_bar=false"])
    first, _ = restore(workdir, step=2)
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(first), _leaves(params)))

    # the eval command reads the run's checkpoint (either step) and its protocol and token budget
    summaries = {}
    for step in (2, 4):
        ev = subprocess.run([sys.executable, "-m", "jaxdebate.eval", "--model", str(workdir), "--step", str(step),
                             "--data", "arithmetic:n=6,seed=5", "--out", str(tmp_path / f"eval{step}.jsonl"),
                             "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert ev.returncode == 0, ev.stderr[-3000:]
        summaries[step] = json.loads(ev.stdout.strip().splitlines()[-1])
        assert summaries[step]["n"] == 6 and summaries[step]["max_tokens"] == config.sampler.max_new_tokens
    rows = [json.loads(line) for line in open(tmp_path / "eval4.jsonl")]
    assert [r["id"] for r in rows] == [f"arithmetic/5/{i:04d}" for i in range(6)]
    assert all(r["completion_tokens"] <= config.sampler.max_new_tokens for r in rows)

    # the trained policy exported as an HF directory loads in transformers with the same logits
    import torch
    from transformers import LlamaForCausalLM

    from jaxdebate.model import logits

    hf = export_checkpoint(workdir, tmp_path / "hf")
    model = LlamaForCausalLM.from_pretrained(str(hf), torch_dtype=torch.float32).eval()
    params, llama, tokenizer, _ = load_policy(workdir)
    ids = tokenizer.encode("Compute $2 + 3$.")
    ours = np.asarray(logits(params, llama, np.array([ids], np.int32)))
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([ids])).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def _leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]
