"""The arithmetic family (configs/arithmetic/) for two steps on the bundled SmolLM2: held-out
validation (single agent and debate) and the transfer set before and after, reward earned under the
answer_line_debate protocol, updates applied."""

import subprocess
import sys
from pathlib import Path

import pytest

from jaxdebate.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.smollm2
def test_two_steps_of_the_family_on_smollm2(tmp_path):
    workdir = tmp_path / "coma"
    overrides = ["training.total_train_steps=2", "training.train_batch_size=1", "data.validation_size=8",
                 "training.validation_every_steps=2", "training.checkpoint_every_steps=2",
                 "sampler.max_new_tokens=32", "logging.progress_bar=false", "logging.tensorboard=false",
                 "data.transfer=arithmetic:templates=1+1/1x1,n=4,seed=11",
                 # where .venv-vllm exists the family samples through the server: eager here, since compiling
                 # SmolLM2 costs a fresh machine ~1 min (the compiled server: tests/test_train_vllm.py)
                 "sampler.vllm.enforce_eager=true"]
    cmd = [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/arithmetic/coma.py", "--workdir",
           str(workdir)] + [a for o in overrides for a in ("--set", o)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    records = read_metrics(workdir)
    validations = [r for r in records if "val/single/accuracy" in r]
    assert [r["step"] for r in validations] == [0, 2]
    assert all(r["val/single/items"] == r["val/debate/items"] == 8 and r["val/transfer/items"] == 4 for r in validations)
    assert all((workdir / "validation" / f"step_{r['step']}.jsonl").is_file() for r in validations)
    steps = [r for r in records if "train/accuracy" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # SmolLM2 answers two-digit arithmetic under this protocol: reward, answers found, updates made
    assert sum(r["train/accuracy"] for r in steps) > 0
    assert all(r["train/no_answer_fraction"] < 0.5 for r in steps)
    assert any(r["learner/updated"] == 1.0 for r in steps)
