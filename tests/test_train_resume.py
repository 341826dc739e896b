"""Exact resume through the real CLI in subprocesses: a run stopped by SIGTERM (graceful checkpoint)
and later killed by SIGKILL, then resumed, ends with bit-identical parameters and identical metrics
(wall-clock fields aside) to a run that went straight through."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxdebate.checkpoint import restore
from jaxdebate.checkpointer import Checkpointer
from jaxdebate.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
OVERRIDES = [
    f"training.total_train_steps={STEPS}", "training.train_batch_size=1", "sampler.max_new_tokens=8",
    "training.validation_every_steps=0", "training.checkpoint_every_steps=2",
    # the sampler lags (export every 3) and the reference moves every step: at the step-2 checkpoint
    # the sampler's weights are neither the policy's nor the reference's, so they are saved separately
    "training.export_every_steps=3", "training.hard_update_ref_every_steps=1", "logging.progress_bar=false",
    "optimizer.warmup_steps=0", "optimizer.peak_lr=3e-3", "optimizer.end_lr=1e-3",
]


def _cmd(workdir):
    return [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir", str(workdir),
            "--set", *OVERRIDES]


def _env(cache):
    return {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def _run(workdir, env):
    out = subprocess.run(_cmd(workdir), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]


def _start_and_signal(workdir, env, sig, ready):
    """Start a run, send ``sig`` once ``ready()`` holds; return the exit status."""
    proc = subprocess.Popen(_cmd(workdir), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 900
        while not ready():
            assert proc.poll() is None, f"run ended before the signal: {proc.stderr.read()[-3000:]}"
            assert time.time() < deadline
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode


def _steps_logged(workdir):
    path = workdir / "metrics.jsonl"
    return [r["step"] for r in read_metrics(path)] if path.exists() else []


def _ckpt_steps(workdir):
    d = workdir / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def _deterministic(record):
    from jaxdebate.rl.step_metrics import NONDETERMINISTIC_PREFIXES

    return {k: v for k, v in record.items() if not k.startswith(NONDETERMINISTIC_PREFIXES)}


@pytest.mark.slow
def test_sigterm_then_sigkill_then_resume_is_exact(tmp_path):
    cache = tmp_path / "jax-cache"
    env = _env(cache)
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    _run(straight, env)

    # 1) SIGTERM while step 2 is in flight: the run checkpoints its last completed step and exits 130
    code = _start_and_signal(broken, env, signal.SIGTERM, lambda: 1 in _steps_logged(broken))
    assert code == 130
    first = _ckpt_steps(broken)
    assert first and first[-1] in (1, 2)
    # 2) resume, then SIGKILL once step 3 is logged: mid step 4, before its checkpoint
    code = _start_and_signal(broken, env, signal.SIGKILL, lambda: 3 in _steps_logged(broken))
    assert code == -signal.SIGKILL
    assert _ckpt_steps(broken)[-1] == 2
    with Checkpointer(broken / "checkpoints") as ckpt:
        meta = ckpt.metadata(2)
    assert meta["sampler_version"] == 0 and meta["ref_version"] == 2
    assert "sampler_params" in meta["__items__"] and "ref_params" not in meta["__items__"]
    # 3) resume to the end
    _run(broken, env)

    p1, c1 = restore(straight)
    p2, c2 = restore(broken)
    assert c1 == c2
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    initial, _ = restore(straight, step=2)
    assert any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(initial), jax.tree.leaves(p1))), "the weights never moved"
    m1, m2 = read_metrics(straight), read_metrics(broken)
    assert [r["step"] for r in m1] == [r["step"] for r in m2] == list(range(1, STEPS + 1))
    for r1, r2 in zip(m1, m2):
        assert _deterministic(r1) == _deterministic(r2), f"step {r1['step']} differs"
    assert m1[-1]["learner/grad_norm"] > 0


@pytest.mark.slow
def test_resume_skips_a_damaged_newest_checkpoint_and_keeps_it(tmp_path):
    """Issue 14 item 1: a truncated data file in the newest step (a preempted job, a bad disk) made the
    relaunch exit 1 with raw orbax tracebacks; it now resumes from the newest readable step."""
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir", str(workdir),
           "--set", "training.total_train_steps=2", "training.checkpoint_every_steps=1", "training.train_batch_size=1",
           "sampler.max_new_tokens=8", "training.validation_every_steps=0", "logging.progress_bar=false",
           "logging.tensorboard=false", "optimizer.warmup_steps=0"]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert _ckpt_steps(workdir) == [1, 2]
    damaged = workdir / "checkpoints" / "2"
    data = max((p for p in (damaged / "params").rglob("*") if p.is_file() and p.parent.name == "d"),
               key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    truncated = data.read_bytes()

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    # no traceback of ours (orbax's abandoned async reads may still print their own when collected)
    frames = [line for line in second.stderr.splitlines() if line.startswith("  File ")]
    assert not [f for f in frames if "/jaxdebate/" in f and "site-packages" not in f], second.stderr[-3000:]
    skipped = [line for line in second.stderr.splitlines() if "unreadable" in line]
    moved = workdir / "unreadable_checkpoints" / "2"
    assert len(skipped) == 1 and str(damaged) in skipped[0] and str(moved) in skipped[0], second.stderr[-3000:]
    assert skipped[0].endswith("resuming from step 1")
    assert (moved / data.relative_to(damaged)).read_bytes() == truncated  # kept as it was, not deleted
    assert "finished at step 2" in second.stderr and _ckpt_steps(workdir) == [1, 2]
    params, _ = restore(workdir)  # step 2 was trained again and saved intact
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params))
