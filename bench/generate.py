"""Benchmark: output tokens/s of our in-process JaxSampler vs transformers ``generate`` on SmolLM2-135M.

The first ``--prompts`` GSM8K test questions (chat template), ``--n`` samples each, exactly
``--new-tokens`` new tokens per sample (end-of-sequence tokens disabled on both sides so the work is
identical), temperature 1 (no top-k/top-p), fp32. Each side runs in its own subprocess, one after the
other; ours is timed after a warm-up call of the same shapes (compile time printed separately).

    .venv/bin/python bench/generate.py                       # 16 prompts x 4 samples x 256 tokens
    .venv/bin/python bench/generate.py --sides jax --new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import hf_dir, rss_gb  # bench/common.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("JAXDEBATE_DATA", ROOT.parent / "shared" / "data")) / "gsm8k_test.jsonl"


def prompts(tokenizer, count: int) -> list[list[int]]:
    questions = [json.loads(line)["question"] for line in DATA.read_text().splitlines()[:count]]
    return [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in questions]


def run_jax(args) -> dict:
    from jaxdebate.model import load, load_tokenizer
    from jaxdebate.sampling import JaxSampler, SamplingParams

    tokenizer = load_tokenizer("smollm2")
    params, config = load("smollm2")
    ids = prompts(tokenizer, args.prompts)
    sp = SamplingParams(temperature=1.0, max_tokens=args.new_tokens, n=args.n, seed=0)
    sampler = JaxSampler(params, config, tokenizer, stop_ids=(), max_batch=args.max_batch)
    start = time.perf_counter()
    sampler.generate(ids, sp)
    first = time.perf_counter() - start
    times, cpu_times, produced = [], [], 0
    for _ in range(args.repeats):
        start, cpu = time.perf_counter(), time.process_time()
        out = sampler.generate(ids, sp)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
        produced = sum(len(c.token_ids) for cs in out for c in cs)
    return {"times": times, "cpu_times": cpu_times, "first_s": first, "tokens": produced, "compiles": sampler.compile_counts(),
            "sample": out[0][0].text[:200]}


def run_torch(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from jaxdebate.model import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    model = AutoModelForCausalLM.from_pretrained(hf_dir(), dtype=torch.float32).eval()
    batch = tokenizer.pad_left(prompts(tokenizer, args.prompts))
    ids = torch.tensor(batch.ids, dtype=torch.long)
    mask = torch.tensor(batch.mask, dtype=torch.long)
    torch.manual_seed(0)
    times, cpu_times, produced = [], [], 0
    for _ in range(args.repeats):
        start, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, num_return_sequences=args.n,
                pad_token_id=tokenizer.pad_id,
            )
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
        produced = int(out[:, ids.shape[1]:].numel())
    return {"times": times, "cpu_times": cpu_times, "tokens": produced, "threads": torch.get_num_threads(),
            "sample": tokenizer.decode(out[0, ids.shape[1]:].tolist())[:200]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sides", nargs="+", default=["jax", "torch"], choices=["jax", "torch"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = run_jax(args) if args.child == "jax" else run_torch(args)
        result["rss_gb"] = rss_gb()
        print("RESULT " + json.dumps(result), flush=True)
        return
    rates, cpu_rates = {}, {}
    for side in args.sides:
        cmd = [sys.executable, __file__, "--child", side, "--prompts", str(args.prompts), "--n", str(args.n),
               "--new-tokens", str(args.new_tokens), "--max-batch", str(args.max_batch),
               "--repeats", str(args.repeats)]
        load = os.getloadavg()[0]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            print(f"{side}: FAILED\n{proc.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(line[len("RESULT "):])
        best = min(r["times"])
        rates[side] = r["tokens"] / best
        cpu_rates[side] = r["tokens"] / min(r["cpu_times"])
        extra = f"  first call (compile) {r['first_s']:.1f}s  compiles {r['compiles']}" if side == "jax" else ""
        print(f"{side:5s} {r['tokens']} tokens in {best:.1f}s = {rates[side]:.1f} tok/s "
              f"(CPU {min(r['cpu_times']):.1f}s = {cpu_rates[side]:.1f} tok/CPU-s)  RSS {r['rss_gb']:.1f} GB"
              f"  load {load:.1f}{extra}\n      sample: {r['sample']!r}", flush=True)
    if len(rates) == 2:
        print(f"ratio ours/transformers: {rates['jax'] / rates['torch']:.2f}x wall, "
              f"{cpu_rates['jax'] / cpu_rates['torch']:.2f}x per CPU-second")


if __name__ == "__main__":
    main()
