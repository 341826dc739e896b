"""Sampling throughput: the vLLM server vs our JaxSampler vs transformers ``generate``; weight-sync latency.

Workload (issue 6): SmolLM2-135M-Instruct, 16 GSM8K questions as chat prompts, n=4 samples each,
256 new tokens, temperature 1 (top-p 1). Output tokens/s counts the tokens each backend returned
(up to EOS) over the wall time of one warm call. Also measured: vLLM start-up, the latency of
``update_weights`` (the bf16 sync file written to /dev/shm, or pushed over HTTP, + in-place load; the
median of ``--syncs``), and how closely the bf16 server's greedy continuations follow our float32 JAX
model's.

    .venv/bin/python bench/sampler.py                   # everything (~10 min on 2 cores)
    .venv/bin/python bench/sampler.py --skip hf,jax     # vLLM only
    .venv/bin/python bench/sampler.py --sync-only       # weight-sync latency only (path, then push)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from jaxdebate.model import export_hf, load, load_tokenizer
from jaxdebate.sampling.base import SamplingParams
from jaxdebate.sampling.vllm.config import VLLMConfig

GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k_test.jsonl"


def prompts_from_gsm8k(tokenizer, count: int) -> list[list[int]]:
    questions = []
    if GSM8K.is_file():
        with open(GSM8K) as f:
            questions = [json.loads(line)["question"] for _, line in zip(range(count), f)]
    while len(questions) < count:  # without the shared data: synthetic word problems
        i = len(questions)
        questions.append(f"A farmer has {i + 12} cows and buys {3 * i + 5} more. How many cows now?")
    return [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in questions]


def count_tokens(results) -> int:
    return sum(len(c.token_ids) for per_prompt in results for c in per_prompt)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def perturbed(params, k: int):
    """A slightly different tree per sync, so every sync moves real bytes (computed before timing)."""
    return jax.block_until_ready(jax.tree.map(lambda x: x * (1.0 + 1e-3 * k), params))


def sync_latency(sampler, params, count: int) -> dict:
    """``count`` syncs of perturbed trees: per-phase lists and the median total."""
    syncs = []
    for k in range(1, count + 1):
        sampler.update_weights(perturbed(params, k), k)
        syncs.append(sampler.last_sync)
    totals = [s.total_s for s in syncs]
    return {"sync_export_s": [s.export_s for s in syncs], "sync_upload_s": [s.upload_s for s in syncs],
            "sync_reload_s": [s.reload_s for s in syncs], "sync_total_s": totals}


def print_sync(label: str, row: dict) -> None:
    med = {k: float(np.median(row[f"sync_{k}_s"])) for k in ("export", "upload", "reload", "total")}
    print(f"sync latency, {label}, median of {len(row['sync_total_s'])}: export {med['export']:.3f} s + "
          f"upload {med['upload']:.3f} s + reload {med['reload']:.3f} s = total {med['total']:.3f} s "
          f"(each: {', '.join(f'{x:.3f}' for x in row['sync_total_s'])})")


def bench_push_sync(params, config, tokenizer, args, workdir: Path) -> dict:
    """Sync latency to a server started on its own (as on another host), weights pushed over HTTP."""
    import os
    import secrets

    from jaxdebate.sampling.vllm.client import VLLMSampler
    from jaxdebate.sampling.vllm.server import VLLMServer

    export_hf(params, config, workdir / "served", tokenizer=tokenizer, dtype="bfloat16")
    key = secrets.token_urlsafe(32)
    cfg = VLLMConfig(dtype="bfloat16", enforce_eager=not args.compiled, kv_cache_gib=2)
    with VLLMServer(cfg, workdir / "remote", workdir / "served", api_key=key) as server:
        os.environ["VLLM_API_KEY"] = key
        try:
            remote = dataclasses.replace(cfg, url=server.url, sync="push")
            sampler = VLLMSampler.from_params(params, config, workdir=workdir, tokenizer=tokenizer, config=remote)
        finally:
            os.environ.pop("VLLM_API_KEY", None)
        try:
            return sync_latency(sampler, params, args.syncs)
        finally:
            sampler.close()


def greedy_agreement(a, b) -> dict:
    """Token-level agreement of two greedy runs: prompts equal throughout, tokens before divergence."""
    same, prefix, total, lp_diff = 0, 0, 0, 0.0
    for ra, rb in zip(a, b):
        x, y = ra[0], rb[0]
        n = 0
        while n < min(len(x.token_ids), len(y.token_ids)) and x.token_ids[n] == y.token_ids[n]:
            n += 1
        same += x.token_ids == y.token_ids
        prefix += n
        total += len(y.token_ids)
        if n:
            lp_diff = max(lp_diff, float(np.max(np.abs(np.subtract(x.logprobs[:n], y.logprobs[:n])))))
    return {"prompts_identical": int(same), "prompts": len(a), "tokens_before_divergence": prefix,
            "tokens": total, "max_abs_logprob_diff_on_common_prefix": lp_diff}


def bench_vllm(params, config, tokenizer, prompts, sp, args, workdir: Path) -> dict:
    from jaxdebate.sampling.vllm.client import VLLMSampler

    cfg = VLLMConfig(dtype="bfloat16", enforce_eager=not args.compiled, kv_cache_gib=2)
    sampler, start_s = timed(lambda: VLLMSampler.from_params(
        params, config, workdir=workdir, config=cfg, tokenizer=tokenizer))
    try:
        sampler.generate(prompts[:2], SamplingParams(temperature=1.0, max_tokens=16, seed=1))  # warm-up
        if args.sync_only:
            return {"startup_s": start_s, **sync_latency(sampler, params, args.syncs)}
        out, wall = timed(lambda: sampler.generate(prompts, sp))
        syncs = sync_latency(sampler, params, args.syncs)
        sampler.update_weights(params, args.syncs + 1)
        greedy = SamplingParams(temperature=0.0, max_tokens=args.greedy_tokens)
        vllm_greedy = sampler.generate(prompts, greedy)
    finally:
        sampler.close()
    return {
        "startup_s": start_s, "tokens": count_tokens(out), "wall_s": wall,
        "tokens_per_s": count_tokens(out) / wall, **syncs, "greedy": vllm_greedy,
    }


def bench_jax(params, config, tokenizer, prompts, sp, max_batch: int) -> dict:
    from jaxdebate.sampling import JaxSampler

    with JaxSampler(params, config, tokenizer, max_total_len=1024, max_batch=max_batch) as sampler:
        _, first = timed(lambda: sampler.generate(prompts, sp))  # compiles the shapes of this workload
        out, wall = timed(lambda: sampler.generate(prompts, sp))
    return {"tokens": count_tokens(out), "wall_s": wall, "first_call_s": first,
            "tokens_per_s": count_tokens(out) / wall}


def bench_hf(params, config, tokenizer, prompts, sp, workdir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    export_hf(params, config, workdir / "hf", tokenizer=tokenizer, dtype="float32")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the peer runs where the JaxSampler does
    model = AutoModelForCausalLM.from_pretrained(str(workdir / "hf"), dtype=torch.float32).to(device).eval()
    batch = tokenizer.pad_left(prompts)
    ids = torch.tensor(batch.ids, dtype=torch.long, device=device)
    mask = torch.tensor(batch.mask, dtype=torch.long, device=device)
    stops = list(tokenizer.stop_ids)

    def run(max_new):
        torch.manual_seed(0)
        with torch.no_grad():
            return model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=sp.temperature,
                top_p=sp.top_p, top_k=0, max_new_tokens=max_new, num_return_sequences=sp.n,
                eos_token_id=stops, pad_token_id=tokenizer.pad_id,
            )

    run(4)  # warm-up
    out, wall = timed(lambda: run(sp.max_tokens))
    new = out[:, ids.shape[1]:].cpu().numpy()
    tokens = 0
    for row in new:  # up to and including the first stop token
        hits = np.nonzero(np.isin(row, stops))[0]
        tokens += int(hits[0]) + 1 if len(hits) else len(row)
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="smollm2")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--greedy-tokens", type=int, default=64)
    parser.add_argument("--compiled", action="store_true", help="vLLM without --enforce-eager")
    parser.add_argument("--jax-max-batch", type=int, default=64,
                        help="rows the JaxSampler decodes together (sampler.jax.max_batch; raise it on a GPU)")
    parser.add_argument("--skip", default="", help="comma-separated: vllm,jax,hf")
    parser.add_argument("--sync-only", action="store_true",
                        help="only the weight-sync latency: path syncs to a local server, then push syncs")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    logging.basicConfig(level=logging.WARNING)

    params, config = load(args.source)
    tokenizer = load_tokenizer(args.source)
    prompts = prompts_from_gsm8k(tokenizer, args.prompts)
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=args.tokens, n=args.n, seed=0)
    print(f"workload: {args.source}, {len(prompts)} prompts (mean {np.mean([len(p) for p in prompts]):.0f} "
          f"tokens) x n={args.n} x {args.tokens} new tokens, temperature 1")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as tmp:
        tmp = Path(tmp)
        if args.sync_only:
            print_sync("path (/dev/shm)", bench_vllm(params, config, tokenizer, prompts, sp, args, tmp))
            print_sync("push (HTTP)", bench_push_sync(params, config, tokenizer, args, tmp))
            return
        if "vllm" not in skip:
            if not VLLMConfig().installed():
                print("vLLM: skipped (.venv-vllm missing: bash scripts/install_vllm.sh)")
            else:
                rows["vLLM (bf16, " + ("compiled" if args.compiled else "eager") + ")"] = v = bench_vllm(
                    params, config, tokenizer, prompts, sp, args, tmp)
                print(f"vLLM start-up {v['startup_s']:.1f} s")
                print_sync(f"{args.source} bf16, path (/dev/shm)", v)
        if "jax" not in skip:
            rows["JaxSampler (f32)"] = j = bench_jax(params, config, tokenizer, prompts, sp, args.jax_max_batch)
            print(f"JaxSampler first call (compiles) {j['first_call_s']:.1f} s")
            vkey = next((k for k in rows if k.startswith("vLLM")), None)
            if vkey is not None:
                from jaxdebate.sampling import JaxSampler

                with JaxSampler(params, config, tokenizer, max_total_len=1024) as jax_sampler:
                    greedy = SamplingParams(temperature=0.0, max_tokens=args.greedy_tokens)
                    ref = jax_sampler.generate(prompts, greedy)
                agree = greedy_agreement(rows[vkey]["greedy"], ref)
                print("greedy agreement, vLLM bf16 vs JaxSampler f32 on the same weights: "
                      + json.dumps(agree))
        if "hf" not in skip:
            rows["transformers generate (f32)"] = bench_hf(params, config, tokenizer, prompts, sp, tmp)
    peer = rows.get("transformers generate (f32)")
    print("\n| backend | output tokens | wall s | tokens/s | vs transformers |\n|---|---|---|---|---|")
    for name, r in rows.items():
        ratio = f"{r['tokens_per_s'] / peer['tokens_per_s']:.2f}x" if peer else "-"
        print(f"| {name} | {r['tokens']} | {r['wall_s']:.1f} | {r['tokens_per_s']:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
