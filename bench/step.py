"""Benchmark: one whole GRPO step (sample -> grade -> advantages -> update -> weight sync), ours vs TRL's
``GRPOTrainer``, on the same workload in the same run.

The workload (issue 12): SmolLM2-135M-Instruct (the bundled GGUF, exported once to an HF directory
that TRL loads; ours loads the GGUF), 2 prompts x 4 generations per step, up to 128 new tokens at
T=1, one agent answering once, KL beta 0.03, fp32, no filters (every step updates). The prompts are
the same on both sides: the first ``2 x steps`` problems of configs/arithmetic's training stream (seed
42), with that family's ``answer_line`` protocol (a worked example, an ``Answer: <number>`` line),
rewarded 1 when the extracted number equals the gold answer. Ours runs ``python -m jaxdebate.launch``
(its default sampler for the machine, see ``sampler.backend``); TRL runs its default CPU generation
path. Each side runs in its own process, one after the other::

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/step.py                  # prints both medians, then the ratio
    .venv/bin/python bench/step.py --steps 4 --model tiny   # a quick check of the harness

The last line is ``step time ratio ours/trl: X`` (median steady-state step, steps after the first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import hf_dir  # bench/common.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = "configs/arithmetic/identity.py"
PROMPTS, GENERATIONS, MAX_NEW, BETA, LR = 2, 4, 128, 0.03, 3e-5


def workload(steps: int):
    """The config both sides follow, and the step's items in the order ours consumes them."""
    from jaxdebate.configlib import load_config
    from jaxdebate.data import ItemStream

    config = load_config(CONFIG, [f"training.train_batch_size={PROMPTS}"])
    train, _ = config.data.load()
    stream = ItemStream(train, PROMPTS, config.training.seed)
    return config, [item for _ in range(steps) for item in stream.next_batch()]


# --------------------------------------------------------------------------------------------- ours


def run_ours(args) -> list[float]:
    from jaxdebate.metrics import read_metrics

    with tempfile.TemporaryDirectory(prefix="bench-step-") as workdir:
        sets = [
            f"training.train_batch_size={PROMPTS}", f"training.generations_per_prompt={GENERATIONS}",
            "debate.num_agents=1", "debate.num_rounds=1", f"sampler.max_new_tokens={MAX_NEW}",
            f"loss.beta={BETA}", "loss.filter_zero_signal=false", "loss.filter_truncated=false",
            f"training.total_train_steps={args.steps}", "training.validate_at_start=false",
            "training.validation_every_steps=0", "training.checkpoint_every_steps=0",
            "training.export_every_steps=1", "optimizer.warmup_steps=0", f"optimizer.peak_lr={LR}",
            f"optimizer.end_lr={LR}", "logging.progress_bar=false", f"model.source={args.model}", *args.set,
        ]
        cmd = [sys.executable, "-m", "jaxdebate.launch", "--config", CONFIG, "--workdir", workdir, "--set", *sets]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        records = [r for r in read_metrics(workdir) if "time/step" in r]
    for r in records:
        print(f"  ours step {r['step']}: {r['time/step']:.1f} s (sampling {r.get('time/sampling', 0):.1f}, "
              f"learning {r.get('time/learning', 0):.1f} on {r.get('batch/padded_tokens', 0):.0f} positions, "
              f"sync {r.get('time/sync', 0):.2f}), "
              f"reward {r.get('train/reward/raw/mean', float('nan')):.3f}", flush=True)
    return [r["time/step"] for r in records]


# ---------------------------------------------------------------------------------------------- trl


def run_trl(args) -> list[float]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from jaxdebate.debate import Grader
    from jaxdebate.debate.answers import extract_answer
    from jaxdebate.debate.envs import make_env

    config, items = workload(args.steps)
    env = make_env("math", config.debate)
    data = Dataset.from_list([{"prompt": env.first_messages(it), "gold": it.answer} for it in items])
    grader = Grader()

    def correct(completions, gold, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(grader.equivalent(g, extract_answer(t, config.debate.extraction))) for t, g in zip(texts, gold)]

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t0 = 0.0

        def on_step_begin(self, *_, **__):
            self._t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.times.append(time.perf_counter() - self._t0)

    path = hf_dir(args.model)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    timer = StepTimes()
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out:
        cfg = GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS,
            gradient_accumulation_steps=1, max_completion_length=MAX_NEW, temperature=1.0, beta=BETA,
            learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, max_steps=args.steps,
            use_cpu=True, bf16=False, fp16=False, logging_steps=1, save_strategy="no", report_to=[],
            shuffle_dataset=False, seed=42, disable_tqdm=True,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=correct, args=cfg, train_dataset=data,
                              processing_class=tokenizer, callbacks=[timer])
        trainer.train()
        rewards = [h.get("reward") for h in trainer.state.log_history if "reward" in h]
    for k, t in enumerate(timer.times, start=1):
        reward = rewards[k - 1] if k - 1 < len(rewards) else float("nan")
        print(f"  trl  step {k}: {t:.1f} s, reward {reward:.3f}", flush=True)
    return timer.times


# --------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="steps per side (the first is not timed)")
    parser.add_argument("--model", default="smollm2", help="model source for both sides (e.g. tiny for a quick check)")
    parser.add_argument("--set", nargs="*", default=[], help="extra overrides for our side")
    parser.add_argument("--side", choices=("ours", "trl"), help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step compiles and is not timed)")
    if args.side:
        times = (run_ours if args.side == "ours" else run_trl)(args)
        print("RESULT " + json.dumps(times), flush=True)
        return

    medians = {}
    for side in ("ours", "trl"):
        cmd = [sys.executable, __file__, "--side", side, "--steps", str(args.steps), "--model", args.model,
               "--set", *args.set]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        print(out.stdout, end="")
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.exit(f"{side} failed:\n{out.stderr[-4000:]}")
        times = json.loads(lines[-1][7:])
        medians[side] = statistics.median(times[1:])
        print(f"{side}: median steady-state step {medians[side]:.1f} s over steps 2..{len(times)}", flush=True)
    print(f"step time ratio ours/trl: {medians['ours'] / medians['trl']:.2f}")


if __name__ == "__main__":
    main()
