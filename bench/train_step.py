"""Benchmark: our jitted GRPO train step vs the same loss written in PyTorch, on SmolLM2-135M.

Both sides take one optimiser step (AdamW) on the same batch (``--batch`` sequences of ``--length``
tokens: a ``--prompt``-token prompt + completion, loss on the completion) with the same loss: clipped
ratio x truncated importance weight vs sampler log-probs, k3 KL to a reference copy of the weights
(beta 0.03, reference forward included), token-mean aggregation, grad-norm clip 1.0, entropy logged.
Both run the output head on the completions only: ours on each row's loss window (a power of two or
1.5 times one), torch from the shortest prompt's end on (``logits_to_keep``, as TRL does).
Each variant runs in its own subprocess, one after another, so peak RSS is per variant.
``--workload debate`` is a configs/arithmetic step instead (48 turns of unequal lengths whose prompts
repeat or extend each other): torch pads one batch to the longest sequence, ``jax-fp32`` pads each
sample to a length bucket, ``jax-fp32-packed`` packs with shared prefixes, ``jax-fp32-packed-lora``
trains a rank-16 LoRA adapter on q/k/v/o instead of every weight (LoRA-GRPO, ``model.lora``), and
``torch-fp32-packed`` is the like-for-like peer of ``jax-fp32-packed``: torch on the very same packed
rows (a 4-D block-causal mask with the shared prefixes, the same positions, the output head on the
completion windows only). ``-bf16dots`` variants are the fp32 learner with ``model.dot_dtype =
"bfloat16"`` (the layers' matmul operands rounded to bf16, f32 accumulation); they also print how far
their token log-probs are from the fp32 model's on real text (GSM8K test solutions), which is the
sampler/learner mismatch the loss's importance weight would see from an fp32 sampler. ``-bf16grads``
variants round only the operands of the gradient contractions, the output head's included
(``model.dot_dtype = "bfloat16_grads"``): their forward is the fp32 one (the printed gap is 0). Both
kinds also print how far the gradient of those log-probs is from the fp32 model's, on the same text.
tokens/s counts sequence tokens (what the samples hold), not the padded or packed positions a side
computes:

    .venv/bin/python bench/train_step.py                 # jax/torch x fp32/bf16, prints the ratios
    .venv/bin/python bench/train_step.py --workload debate --variants jax-fp32 jax-fp32-packed torch-fp32
    .venv/bin/python bench/train_step.py --workload debate --variants jax-fp32-packed jax-fp32-packed-lora
    .venv/bin/python bench/train_step.py --variants jax-fp32 torch-fp32 --steps 2
    .venv/bin/python bench/train_step.py --variants jax-fp32 jax-fp32-bf16dots torch-fp32 --steps 2
    .venv/bin/python bench/train_step.py --variants jax-fp32 jax-fp32-bf16grads torch-fp32 --steps 2
    .venv/bin/python bench/train_step.py --trainer-step  # phase shares of one real SmolLM2 trainer step

The weights are the bundled SmolLM2-135M-Instruct GGUF, exported once to an HF directory that both
sides load (``$JAXDEBATE_CACHE/bench-smollm2-hf``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import child_result, hf_dir, rss_gb  # bench/common.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("jax-fp32", "jax-fp32-packed", "jax-fp32-packed-lora", "torch-fp32", "torch-fp32-packed", "jax-bf16",
            "torch-bf16", "jax-fp32-bf16dots", "jax-fp32-packed-bf16dots", "jax-fp32-bf16grads",
            "jax-fp32-packed-bf16grads")
CLIP, CAP, BETA = 0.2, 2.0, 0.03


def make_samples(args, seed: int = 0):
    """The step's samples as ``(prompt, completion, sampler_logprobs, advantage)`` numpy tuples.

    ``uniform``: ``--batch`` sequences of ``--length`` tokens, the first ``--prompt`` of them prompt.
    ``debate``: what a step of configs/arithmetic looks like (``--prompts`` (2) prompts x 4 debates x 3
    agents x 2 rounds = 24 turns per prompt): round-1 turns repeat their question's prompt (``--prompt`` tokens), round-2
    prompts extend it by the other agents' answers (40-80 tokens); completions of 8-48 tokens.
    """
    import numpy as np

    rng = np.random.default_rng(seed)

    def completion(n):
        return rng.integers(10, 49000, n).astype(np.int32), rng.normal(-2.0, 0.5, n).astype(np.float32)

    out = []
    if args.workload == "uniform":
        for _ in range(args.batch):
            c, lp = completion(args.length - args.prompt)
            out.append((rng.integers(10, 49000, args.prompt).astype(np.int32), c, lp, float(rng.normal())))
        return out
    for _ in range(args.prompts):
        question = rng.integers(10, 49000, args.prompt).astype(np.int32)
        for turn in range(24):
            prompt = question if turn < 12 else np.concatenate(
                [question, rng.integers(10, 49000, int(rng.integers(40, 81))).astype(np.int32)])
            c, lp = completion(int(rng.integers(8, 49)))
            out.append((prompt, c, lp, float(rng.normal())))
    return out


def sequence_tokens(samples) -> int:
    return sum(len(p) + len(c) for p, c, _, _ in samples)


# --------------------------------------------------------------------------------------------- jax


def jax_step(args, *, with_gap: bool = False):
    """Our side of ``args.variant``, ready to step: ``(learner, state, micro_batches, stats, config, gap)``
    (``gap``: :func:`text_logprob_gap` for the bf16 variants when ``with_gap``, else None).
    bench/step_profile.py traces the same step."""
    from jaxdebate.config import LossConfig, OptimizerConfig, PolicyLoraConfig
    from jaxdebate.model import load
    from jaxdebate.rl.batching import Sample, make_microbatches
    from jaxdebate.rl.grpo import Learner

    dtype = "bfloat16" if args.variant == "jax-bf16" else "float32"
    dots = {"bf16dots": "bfloat16", "bf16grads": "bfloat16_grads"}.get(args.variant.rsplit("-", 1)[-1], "compute")
    params, config = load(str(hf_dir()), dtype=dtype, dot_dtype=dots, remat=args.remat)
    # before the learner takes the parameters (its update donates them)
    gap = text_logprob_gap(params, config) if with_gap and dots != "compute" else None
    samples = [Sample(*s) for s in make_samples(args)]
    max_len = args.length if args.workload == "uniform" else 512
    mbs, stats = make_microbatches(samples, max_len=max_len, rows_cap=len(samples), max_tokens=args.max_tokens,
                                   aggregation="token", packing="packed" in args.variant)
    lora = PolicyLoraConfig(rank=16, alpha=32.0) if args.variant.endswith("lora") else None  # q, k, v, o
    learner = Learner(config, LossConfig(beta=BETA, clip_eps=CLIP, importance_weight_cap=CAP),
                      OptimizerConfig(peak_lr=1e-6, end_lr=1e-6, grad_clip=1.0), 100, lora=lora)
    return learner, learner.init_state(params), mbs, stats, config, gap


def run_jax(args) -> dict:
    import jax
    import numpy as np

    learner, state, mbs, stats, config, gap = jax_step(args, with_gap=True)
    base = rss_gb()
    t0 = time.perf_counter()
    state, m = learner.update(state, mbs)
    jax.block_until_ready(state.params)
    first = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        state, m = learner.update(state, mbs)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - t0)
    out = {"first_step_s": first, "step_s": float(np.median(times)), "loss": m["loss"],
           "rss_after_load_gb": base, "peak_rss_gb": rss_gb(), "computed_tokens": stats["padded_tokens"],
           "shapes": [list(mb["tokens"].shape) + [mb["targets"].shape[1]] for mb in mbs],
           "device": str(jax.devices()[0].device_kind), "flops_per_token": config.flops_per_token(args.length)}
    if gap is not None:
        out["logprob_gap"] = gap
    return out


def text_logprob_gap(params, config) -> dict:
    """How far ``config``'s numerics are from the same weights with float32 dots, on real text: the
    GSM8K test set's first questions and solutions, 4 windows of 256 tokens (the workload's random
    tokens are far out of distribution). |token log-prob difference|: mean, 99th percentile and max over
    the predicted tokens; and the gradient of their sum: its relative L2 distance to float32's."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdebate.data.sources import read_source
    from jaxdebate.model import load_tokenizer, token_logprobs

    tokenizer = load_tokenizer("smollm2")
    ids: list[int] = []
    for item in read_source("gsm8k_test"):
        ids += tokenizer.encode(f"{item.problem}\n{item.meta['solution']}\n\n")
        if len(ids) >= 1024:
            break
    tokens = np.asarray(ids[:1024], np.int32).reshape(4, 256)
    mask = np.ones_like(tokens, bool)
    fp32 = dataclasses.replace(config, dot_dtype="compute")
    gap = np.abs(np.asarray(token_logprobs(params, config, tokens, mask))
                 - np.asarray(token_logprobs(params, fp32, tokens, mask)))[:, 1:]

    def grad(c):
        return jax.grad(lambda p: jnp.sum(token_logprobs(p, c, tokens, mask)[:, 1:]))(params)

    ours, ref = grad(config), grad(fp32)
    sq = sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)))
    norm = sum(float(jnp.sum(b**2)) for b in jax.tree.leaves(ref))
    return {"mean": float(gap.mean()), "p99": float(np.quantile(gap, 0.99)), "max": float(gap.max()),
            "grad_rel": (sq / norm) ** 0.5}


# ------------------------------------------------------------------------------------------- torch


def timed_torch_steps(step, args, *, computed_tokens) -> dict:
    """A torch variant's result: ``step()`` once (the first step), then the median of ``--steps`` more."""
    import numpy as np
    import torch

    base = rss_gb()
    t0 = time.perf_counter()
    loss = step()
    first = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    return {"first_step_s": first, "step_s": float(np.median(times)), "loss": loss,
            "rss_after_load_gb": base, "peak_rss_gb": rss_gb(), "threads": torch.get_num_threads(),
            "computed_tokens": computed_tokens, "device": torch_device()}


def torch_device() -> str:
    """``cuda`` where torch sees a GPU (then with TF32 matmuls, as XLA computes float32 dots on GPU by
    default, so that fp32 compares like with like), else ``cpu``."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return "cuda"


def torch_token_loss(lp, old, smp, ref_lp, adv):
    """The same per-token loss as ours: clipped ratio x truncated importance weight + beta x k3 KL."""
    import torch

    ratio = torch.exp(lp - old)
    pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * adv)
    w = torch.clamp(torch.exp(old - smp), max=CAP)
    log_r = ref_lp - lp
    return w * pg + BETA * (torch.exp(log_r) - log_r - 1)


def run_torch(args) -> dict:
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    bf16 = args.variant.endswith("bf16")
    device = torch_device()
    model = LlamaForCausalLM.from_pretrained(str(hf_dir()), torch_dtype=torch.float32).to(device)
    ref = LlamaForCausalLM.from_pretrained(str(hf_dir()), torch_dtype=torch.float32).to(device).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    # one right-padded batch (what TRL does); the loss covers completion tokens only
    samples = make_samples(args)
    width = max(len(p) + len(c) for p, c, _, _ in samples)
    tokens = torch.zeros((len(samples), width), dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    loss_mask = torch.zeros((len(samples), width), dtype=torch.bool)
    sampler_lp = torch.zeros((len(samples), width))
    for i, (p, c, lp, _) in enumerate(samples):
        n = len(p) + len(c)
        tokens[i, :n] = torch.from_numpy(np.concatenate([p, c]).astype(np.int64))
        attention[i, :n] = 1
        loss_mask[i, len(p):n] = True
        sampler_lp[i, len(p):n] = torch.from_numpy(lp)
    tokens, attention, loss_mask = tokens.to(device), attention.to(device), loss_mask.to(device)
    # the output head only from the shortest prompt's last position on, as TRL's logits_to_keep runs it
    # on the completions only (the loss never reads a prompt position's log-prob)
    first = min(len(p) for p, _, _, _ in samples)
    keep = width - first + 1
    mask = loss_mask[:, first:].float()
    adv_t = torch.tensor([a for _, _, _, a in samples], device=device)[:, None]
    smp = sampler_lp[:, first:].to(device)

    def token_lp(m, with_entropy):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logits = m(input_ids=tokens, attention_mask=attention, logits_to_keep=keep).logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(-1, tokens[:, first:, None]).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1) if with_entropy else None
        return lp, ent

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            ref_lp, _ = token_lp(ref, False)
        lp, ent = token_lp(model, True)
        loss = (torch_token_loss(lp, lp.detach(), smp, ref_lp, adv_t) * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        _ = float((ent.detach() * mask).sum() / mask.sum())
        return float(loss)

    return timed_torch_steps(step, args, computed_tokens=tokens.numel())


def packed_batches(args):
    """The step's samples packed as ``jax-fp32-packed`` packs them (the micro-batches' numpy arrays)."""
    from jaxdebate.rl.batching import Sample, make_microbatches

    samples = [Sample(*s) for s in make_samples(args)]
    max_len = args.length if args.workload == "uniform" else 512
    return make_microbatches(samples, max_len=max_len, rows_cap=len(samples), max_tokens=args.max_tokens,
                             aggregation="token", packing=True)


def run_torch_packed(args) -> dict:
    """Torch on our packed rows: what a padding-free torch learner computes for the same step."""
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    device = torch_device()
    model = LlamaForCausalLM.from_pretrained(str(hf_dir()), torch_dtype=torch.float32,
                                             attn_implementation="sdpa").to(device)
    ref = LlamaForCausalLM.from_pretrained(str(hf_dir()), torch_dtype=torch.float32,
                                           attn_implementation="sdpa").to(device).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    mbs, stats = packed_batches(args)

    def tensors(mb):
        seg, pre = torch.from_numpy(mb["segment_ids"]), torch.from_numpy(mb["prefix_ids"])
        n = seg.shape[1]
        visible = (seg[:, None, :] == seg[:, :, None]) | (seg[:, None, :] == pre[:, :, None])
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))[None] & visible & (seg[:, None, :] > 0)
        mask |= torch.eye(n, dtype=torch.bool)[None]  # padding rows see themselves (no all-masked softmax)
        as_long = {k: torch.from_numpy(mb[k].astype(np.int64)) for k in ("tokens", "positions", "window_index", "targets")}
        floats = {k: torch.from_numpy(mb[k]) for k in ("sampler_logprobs", "advantages", "token_weights")}
        out = {**as_long, **floats, "mask": mask[:, None], "loss_mask": torch.from_numpy(mb["loss_mask"])}
        return {k: v.to(device) for k, v in out.items()}

    batches = [tensors(mb) for mb in mbs]

    def token_lp(m, b, with_entropy):
        hidden = m.model(input_ids=b["tokens"], attention_mask=b["mask"], position_ids=b["positions"]).last_hidden_state
        h = hidden.gather(1, b["window_index"][..., None].expand(-1, -1, hidden.shape[-1]))
        logp = torch.log_softmax(m.lm_head(h).float(), dim=-1)
        lp = logp.gather(-1, b["targets"][..., None]).squeeze(-1)
        return lp, (-(logp.exp() * logp).sum(-1) if with_entropy else None)

    def step():
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for b in batches:
            with torch.no_grad():
                ref_lp, _ = token_lp(ref, b, False)
            lp, ent = token_lp(model, b, True)
            per_token = torch_token_loss(lp, lp.detach(), b["sampler_logprobs"], ref_lp, b["advantages"])
            loss = (b["token_weights"] * torch.where(b["loss_mask"], per_token, 0.0)).sum()
            loss.backward()
            total += float(loss)
            _ = float((ent.detach() * b["loss_mask"]).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return total

    return timed_torch_steps(step, args, computed_tokens=stats["padded_tokens"])


# ------------------------------------------------------------------------------------ trainer step


def trainer_step(args) -> None:
    """One real step of configs/coma.py on SmolLM2 (sampling, learning, sync), phase shares printed."""
    from jaxdebate.metrics import read_metrics

    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as workdir:
        cmd = [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/coma.py", "--workdir", workdir,
               "--set", "training.total_train_steps=1", "training.export_every_steps=1",
               "training.validation_every_steps=0", "training.checkpoint_every_steps=0",
               f"sampler.max_new_tokens={args.max_new_tokens}", "logging.progress_bar=false",
               *args.set]
        print("$", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True)
        wall = time.perf_counter() - t0
        (record,) = [r for r in read_metrics(workdir) if r["step"] == 1]
    phases = {k[5:]: v for k, v in record.items() if k.startswith("time/") and k != "time/step"}
    total = record["time/step"]
    print(f"\none trainer step of configs/coma.py: {total:.1f} s (process wall {wall:.1f} s incl. loading)")
    for name, value in sorted(phases.items(), key=lambda kv: -kv[1]):
        note = " (inside sampling+learning)" if name == "compile" else ""
        print(f"  {name:<12} {value:8.1f} s  {100 * value / total:5.1f} %{note}")
    keys = ("train/completion_tokens_mean", "batch/samples", "batch/sequence_tokens", "learner/tokens",
            "throughput/sampled_tokens_per_s", "throughput/learner_tokens_per_s")
    print("  " + ", ".join(f"{k}={record[k]:.1f}" for k in keys if k in record))


# -------------------------------------------------------------------------------------------- main


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """The workload's options (what :func:`make_samples` and :func:`jax_step` read); bench/step_profile.py
    takes the same."""
    parser.add_argument("--workload", default="uniform", choices=("uniform", "debate"),
                        help="uniform: --batch x --length; debate: a configs/arithmetic step (see make_samples)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=2, help="debate workload: prompts per step (24 turns each)")
    parser.add_argument("--max-tokens", type=int, default=16384, help="jax: row positions per micro-batch")
    parser.add_argument("--remat", default="none", choices=("none", "full", "dots"))


def workload_argv(args) -> list[str]:
    """:func:`add_workload_args`' options as parsed, for a variant's child process."""
    return ["--workload", args.workload, "--batch", str(args.batch), "--length", str(args.length), "--prompt",
            str(args.prompt), "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens), "--remat",
            args.remat]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS,
                        default=[v for v in VARIANTS if not v.endswith(("bf16dots", "bf16grads"))])
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # child process
    add_workload_args(parser)
    parser.add_argument("--steps", type=int, default=2, help="timed steps after the first (median)")
    parser.add_argument("--trainer-step", action="store_true")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--set", nargs="*", default=[], help="extra overrides for --trainer-step")
    parser.add_argument("--peak", type=float, help="uniform workload: TFLOP/s that the jax variants' MFU is "
                        "measured against (model FLOPs: 4 forwards per sequence token, policy forward+backward "
                        "and the reference forward)")
    parser.add_argument("--host-memory", default="launcher", choices=("launcher", "default"),
                        help="launcher: every variant (jax and torch alike) runs with the glibc tunables the "
                             "launcher gives a training process (jaxdebate.host_memory); default: glibc's own")
    args = parser.parse_args()

    if args.trainer_step:
        trainer_step(args)
        return
    if args.variant:
        runner = run_jax if args.variant.startswith("jax") else run_torch_packed if args.variant.endswith("packed") else run_torch
        result = runner(args)
        print("RESULT " + json.dumps(result), flush=True)
        return

    # On a GPU this parent only exports the weights, but JAX would hold 75% of the GPU's memory for the
    # parent's whole life (the variants then ran out of memory); the children inherit the setting.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    hf_dir()  # export once, before any timed child
    from jaxdebate import host_memory

    env = dict(os.environ)
    if args.host_memory == "launcher":
        env = host_memory.tuned_environ(env) or env
    else:
        env.pop("GLIBC_TUNABLES", None)
    print(f"host memory (every variant): {host_memory.describe(env)}", flush=True)
    tokens = sequence_tokens(make_samples(args))
    print(f"workload {args.workload}: {len(make_samples(args))} samples, {tokens} sequence tokens", flush=True)
    results = {}
    for variant in args.variants:
        cmd = [sys.executable, __file__, "--variant", variant, "--steps", str(args.steps), *workload_argv(args)]
        result = child_result(cmd, cwd=ROOT, env=env, label=variant)
        if result is None:
            continue
        results[variant] = result
        r = results[variant]
        print(f"{variant:<20} step {r['step_s']:7.2f} s  {tokens / r['step_s']:7.1f} tokens/s  first step "
              f"{r['first_step_s']:7.2f} s  peak RSS {r['peak_rss_gb']:5.2f} GB (after load "
              f"{r['rss_after_load_gb']:.2f})  loss {r['loss']:.5f}  computed tokens {r['computed_tokens']:.0f}",
              flush=True)
        if args.workload == "uniform" and "flops_per_token" in r:
            tflops = 4 * r["flops_per_token"] * tokens / r["step_s"] / 1e12
            mfu = f", MFU {100 * tflops / args.peak:.1f}% of {args.peak:g}" if args.peak else ""
            print(f"{'':<20} on {r['device']}: {tflops:.2f} model TFLOP/s{mfu}", flush=True)
        elif "device" in r:
            print(f"{'':<20} on {r['device']}", flush=True)
        if "logprob_gap" in r:
            g = r["logprob_gap"]
            print(f"{'':<20} token log-prob gap to fp32 dots on GSM8K text: mean {g['mean']:.4f}, "
                  f"p99 {g['p99']:.4f}, max {g['max']:.4f} nats; gradient {g['grad_rel']:.1e} from fp32's "
                  "(relative L2)", flush=True)
    for precision in ("fp32", "bf16"):
        ours, peer = results.get(f"jax-{precision}"), results.get(f"torch-{precision}")
        if ours and peer:
            print(f"{precision}: ours/torch tokens/s = {peer['step_s'] / ours['step_s']:.2f}x, "
                  f"peak RSS ours/torch = {ours['peak_rss_gb'] / peer['peak_rss_gb']:.2f}")
    full, lora = results.get("jax-fp32-packed"), results.get("jax-fp32-packed-lora")
    if full and lora:
        print(f"LoRA-GRPO (rank 16, q/k/v/o) vs full fine-tuning, packed fp32: step time "
              f"{lora['step_s'] / full['step_s']:.2f}x, peak RSS {lora['peak_rss_gb'] / full['peak_rss_gb']:.2f}x")
    # the fp32 learner, then the same with bf16 matmul operands: each against torch fp32
    for suffix, label in (("", ""), ("-bf16dots", " (bf16 dots)"), ("-bf16grads", " (bf16 gradient dots)")):
        ours, peer = results.get(f"jax-fp32-packed{suffix}"), results.get("torch-fp32-packed")
        if ours and peer:
            print(f"packed, like for like (both on the same packed rows): ours{label}/torch = "
                  f"{peer['step_s'] / ours['step_s']:.2f}x")
        ours = [results[v + suffix] for v in ("jax-fp32", "jax-fp32-packed") if v + suffix in results]
        if ours and "torch-fp32" in results:
            best = min(ours, key=lambda r: r["step_s"])
            print(f"train step ratio ours{label}/torch fp32: {results['torch-fp32']['step_s'] / best['step_s']:.2f}")


if __name__ == "__main__":
    main()
