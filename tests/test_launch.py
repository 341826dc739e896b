"""The CLI: invalid configs fail before any compute with a message naming the field; --print-config
and --dry-run; `python -m jaxdebate.launch` as a real process."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxdebate.data.sources import DATASETS, candidate_files
from jaxdebate.launch import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, main

ROOT = Path(__file__).resolve().parents[1]


def test_invalid_override_fails_before_compute_naming_the_field(tmp_path, capsys):
    workdir = tmp_path / "run"
    for override, named in [("loss.beta=-1", "loss.beta"), ("training.bogus=1", "training.bogus"),
                            ("training.generations_per_prompt=3", "n_rollouts_per_prompt"),
                            ("sampler.top_p=2", "sampler.top_p")]:
        assert main(["--config", "configs/coma.py", "--workdir", str(workdir), "--set", override]) == EXIT_CONFIG
        assert named in capsys.readouterr().err
    assert not workdir.exists()


def test_print_config_and_positional_overrides(capsys):
    assert main(["--config", "configs/coma.py", "--print-config", "loss.beta=0.05"]) == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["shaping"] == {"strategy": "coma_advantage", "params": {"n_rollouts_per_prompt": 4}}
    assert printed["loss"]["beta"] == 0.05


@pytest.mark.skipif(not any(p.is_file() for p in candidate_files(DATASETS["math500"])),
                    reason="MATH-500 file not available locally")
def test_dry_run_resolves_math500(capsys):
    assert main(["--config", "configs/coma.py", "--dry-run"]) == EXIT_OK
    assert "450 training items, 50 validation items" in capsys.readouterr().out


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["--config", "configs/coma.py", "--dry-run", "--set", f"data.train={missing}"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err


def test_module_entry_point_runs_as_a_process():
    start = time.time()
    out = subprocess.run([sys.executable, "-m", "jaxdebate.launch", "--config", "configs/coma.py",
                          "--set", "optimizer.end_lr=1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == EXIT_CONFIG
    assert "optimizer.end_lr" in out.stderr and "Traceback" not in out.stderr
    assert time.time() - start < 60  # fails before loading any model


def test_vllm_backend_without_a_server_falls_back_or_fails_before_compute(tmp_path, capsys):
    from jaxdebate.config import load_config
    from jaxdebate.sampling.factory import resolve_backend

    absent = f"sampler.vllm.python={tmp_path / 'no-venv' / 'bin' / 'python'}"
    config = load_config("configs/coma.py", [absent])
    assert config.sampler.backend == "vllm" and config.sampler.fallback == "jax"
    assert resolve_backend(config.sampler) == "jax"
    assert "install_vllm.sh" in capsys.readouterr().err  # the fallback is announced, not silent

    reachable = load_config("configs/coma.py", [absent, "sampler.vllm.url=http://127.0.0.1:1"])
    assert resolve_backend(reachable.sampler) == "vllm"  # a given URL counts as reachable

    workdir = tmp_path / "run"
    assert main(["--config", "configs/coma.py", "--workdir", str(workdir), "--set", absent,
                 "sampler.fallback=error"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "sampler.fallback" in err and "install_vllm.sh" in err
    assert not workdir.exists()
