"""Multi-process training on CPU through the real CLI: two processes (one host device each, joined by
``jax.distributed``) train the smoke config to the same parameters and metrics as one process with two
host devices, and resume exactly after both are killed. Select with ``pytest -k distributed``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxdebate.checkpoint import restore
from jaxdebate.distributed import ProcessGroup, check_training_devices, detect, task_devices
from jaxdebate.errors import ConfigError
from jaxdebate.metrics import read_metrics
from jaxdebate.rl.step_metrics import NONDETERMINISTIC_PREFIXES
from worker_cores import whole_machine

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
OVERRIDES = [
    f"training.total_train_steps={STEPS}", "training.train_batch_size=2", "sampler.max_new_tokens=8",
    "training.validation_every_steps=2", "training.checkpoint_every_steps=2", "training.export_every_steps=1",
    "training.hard_update_ref_every_steps=2", "logging.progress_bar=false", "logging.tensorboard=false",
    "optimizer.warmup_steps=0", "optimizer.peak_lr=3e-3", "optimizer.end_lr=1e-3", "launch.training_devices=2",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cache: Path, devices: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
            "JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def _cmd(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir", str(workdir),
            *extra, "--set", *OVERRIDES]


def _start_pair(workdir: Path, cache: Path, logs: Path) -> list[subprocess.Popen]:
    port = _free_port()
    procs = []
    with whole_machine():
        for i in range(2):
            log = open(logs / f"{workdir.name}.{i}.log", "ab")
            procs.append(subprocess.Popen(
                _cmd(workdir, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)),
                cwd=ROOT, env=_env(cache, 1), stdout=log, stderr=subprocess.STDOUT,
            ))
    return procs


def _wait(procs: list[subprocess.Popen], logs: Path, name: str, timeout: float = 900) -> None:
    try:
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    tails = "\n".join((logs / f"{name}.{i}.log").read_text()[-2000:] for i in range(len(procs)))
    assert [p.returncode for p in procs] == [0] * len(procs), tails


def _deterministic(workdir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC_PREFIXES)}
            for r in read_metrics(workdir / "metrics.jsonl")]


def _assert_same_run(a: Path, b: Path, tol: float) -> None:
    pa, ca = restore(a)
    pb, cb = restore(b)
    assert ca == cb
    for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=tol)
    ma, mb = _deterministic(a), _deterministic(b)
    assert [r["step"] for r in ma] == [r["step"] for r in mb] == list(range(1, STEPS + 1))
    for ra, rb in zip(ma, mb):
        assert ra.keys() == rb.keys(), set(ra) ^ set(rb)
        for key in ra:
            assert ra[key] == pytest.approx(rb[key], rel=tol, abs=tol), (ra["step"], key, ra[key], rb[key])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process with two host devices, and two processes with one each, on the same config.

    Every process runs on all the session's cores (``whole_machine``), as a run's do: with the two
    layouts on one core (a pinned test worker) their learners' last bits differ, and Adam's normalised
    step lifted that to 3.6e-5 between their parameters in two steps (the same samples), past this
    test's 1e-5."""
    tmp = tmp_path_factory.mktemp("distributed")
    cache = tmp / "xla-cache"
    single, pair = tmp / "single", tmp / "pair"
    with whole_machine():
        out = subprocess.run(_cmd(single), cwd=ROOT, env=_env(cache, 2), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    _wait(_start_pair(pair, cache, tmp), tmp, "pair")
    return tmp, cache, single, pair


@pytest.mark.slow
def test_distributed_two_processes_match_one_process_with_two_devices(runs):
    tmp, _, single, pair = runs
    _assert_same_run(single, pair, 1e-5)
    initial, _ = restore(pair, step=2)
    final, _ = restore(pair)
    assert any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(initial), jax.tree.leaves(final))), "the weights never moved"
    log1 = (tmp / "pair.1.log").read_text()
    assert "process 1 of 2 (flags)" in log1


@pytest.mark.slow
def test_distributed_resume_after_killing_both_processes_is_exact(runs):
    tmp, cache, _, pair = runs
    broken = tmp / "broken"
    procs = _start_pair(broken, cache, tmp)
    try:
        deadline = time.time() + 900
        while not (broken / "metrics.jsonl").exists() or 3 not in [r["step"] for r in read_metrics(broken / "metrics.jsonl")]:
            assert all(p.poll() is None for p in procs), (tmp / "broken.0.log").read_text()[-3000:]
            assert time.time() < deadline
            time.sleep(0.05)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert sorted(int(d.name) for d in (broken / "checkpoints").iterdir() if d.name.isdigit()) == [2]
    _wait(_start_pair(broken, cache, tmp), tmp, "broken")
    _assert_same_run(pair, broken, 0.0)


def test_distributed_process_group_detection():
    assert detect(env={}) is None
    assert detect("10.0.0.1:1234", 4, 3) == ProcessGroup(4, 3, "10.0.0.1:1234", "flags")
    assert detect("h:1", 1, 0) is None  # one process: no runtime to start
    slurm = {"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_STEP_NODELIST": "node[1-2]"}
    assert detect(env=slurm) == ProcessGroup(8, 5, None, "slurm")
    assert detect(env={**slurm, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None  # a one-task job step
    assert detect(env={"SLURM_NTASKS": "8", "SLURM_PROCID": "5"}) is None  # sbatch script, not an srun step
    for args, message in [(("h:1", 2, None), "go together"), (("h:1", 2, 2), r"--process-id must be in \[0, 2\)"),
                          (("nohost", 2, 0), "HOST:PORT"), (("h:1", 0, 0), "--num-processes must be >= 1")]:
        with pytest.raises(ConfigError, match=message):
            detect(*args)
    assert task_devices({"CUDA_VISIBLE_DEVICES": "4,5"}) == [0, 1]  # a task pinned to 2 GPUs
    assert task_devices({"CUDA_VISIBLE_DEVICES": ""}) is None and task_devices({}) is None


def test_training_devices_must_be_visible():
    visible = len(jax.devices())
    check_training_devices(visible)  # one process: any count up to what it sees
    with pytest.raises(ConfigError, match=rf"launch.training_devices={visible + 1} but only {visible} device"):
        check_training_devices(visible + 1)


def test_distributed_sampler_devices_are_separate_when_the_process_has_room():
    from jaxdebate.model.mesh import sampling_devices

    gpus = [f"gpu{i}" for i in range(8)]
    assert sampling_devices(gpus, 6, 2) == ["gpu6", "gpu7"]  # the seeds' split: 6 learn, 2 sample
    assert sampling_devices(gpus, 8, 1) == ["gpu0"]  # no room: shared with the learner
    assert sampling_devices(["cpu0"], 1, 1) == ["cpu0"]
    with pytest.raises(ConfigError, match="launch.sampling_devices=3 but process 0 has 2"):
        sampling_devices(["a", "b"], 0, 3)
