"""Benchmark: where the learner's step gains or loses against torch, part by part, on SmolLM2-135M widths.

Each part of the train step runs alone, forward and forward + backward, on ``--batch x --length``
tokens (uniform, causal), ours (the Flax modules and functions the learner uses) against
transformers' own modules on the same weights and inputs:

- ``mlp``: RMSNorm + SwiGLU MLP + residual (ours: ``model.llama.MLP``; torch: ``LlamaMLP``)
- ``attention``: RMSNorm + q/k/v/o projections, RoPE, causal softmax attention + residual (ours:
  ``model.llama.Attention``; torch: ``LlamaAttention`` on SDPA with ``is_causal``, what the full model
  runs for an all-ones mask)
- ``head``: output head (tied embedding), log-softmax at the targets and the entropy (ours:
  ``model.logprobs.hidden_logprobs``, chunked; torch: one ``[N, V]`` logits matrix, as
  ``LlamaForCausalLM`` makes)
- ``adamw``: global-norm clip 1.0 + AdamW on every parameter of the model (ours: ``rl.optim``'s
  ``guarded_apply``, parameters donated; torch: ``clip_grad_norm_`` + ``torch.optim.AdamW``)
- ``mlp-pieces``: the ``mlp`` forward piece by piece on ``[batch x length, width]`` rows, each piece
  alone: the norm, one ``d -> f`` GEMM, gate and up as one ``d -> 2f`` GEMM, ``silu(gate) * up``, the
  ``f -> d`` GEMM, and the whole block again (ours: ``model.llama.matmul``, what ``MLP`` runs; torch:
  ``F.linear`` on ``[out, in]`` weights, what ``LlamaMLP`` runs). Not weighted into the step sum.

A step is roughly ``layers x (mlp + attention)`` forward + backward for the policy, the same forward
only for the reference, ``head`` both ways, and one ``adamw``; the last lines weigh each part's
difference by how often a step runs it, which says which part to work on (parts timed alone do not
add up to a whole step exactly: the step's program reuses buffers and adds the loss). The weights are random
(seeded, equal on both sides): time does not depend on their values; the forward outputs of the two
sides are compared, so a part that computes something else shows up. Both sides run in their own
process, one after the other, with the launcher's host memory (``jaxdebate.host_memory``):

    .venv/bin/python bench/layer_parts.py                     # 8 x 512 tokens, median of 3 after a warm-up
    .venv/bin/python bench/layer_parts.py --parts attention --repeats 5
    .venv/bin/python bench/layer_parts.py --parts mlp-pieces --repeats 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("mlp", "attention", "head", "adamw", "mlp-pieces")
# the pieces of the MLP forward, in the order it runs them (the last is the whole block, norm and residual)
MLP_PIECES = ("norm", "gate GEMM d->f", "gate|up GEMM d->2f", "silu(gate)*up", "down GEMM f->d", "whole block")


def shapes(args) -> dict:
    """The SmolLM2-135M widths (``LlamaConfig``'s defaults) and the workload."""
    from jaxdebate.model.config import LlamaConfig

    c = LlamaConfig()
    return {"d": c.hidden_size, "f": c.intermediate_size, "h": c.num_heads, "kv": c.num_kv_heads,
            "hd": c.head_dim, "v": c.vocab_size, "layers": c.num_layers, "b": args.batch, "t": args.length}


def arrays(s: dict) -> dict:
    """Seeded numpy weights and inputs in our layouts (kernels ``[in, out]``), shared by both sides."""
    import numpy as np

    from jaxdebate.model.config import LlamaConfig
    from jaxdebate.model.llama import rope_inv_freq

    rng = np.random.default_rng(0)

    def w(*shape, scale=0.02):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    d, f, h, kv, hd, b, t = s["d"], s["f"], s["h"], s["kv"], s["hd"], s["b"], s["t"]
    angles = np.arange(t, dtype=np.float32)[:, None] * rope_inv_freq(LlamaConfig())[None]
    return {
        "norm": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        "gate": w(d, f), "up": w(d, f), "down": w(f, d),
        "q": w(d, h * hd), "k": w(d, kv * hd), "v": w(d, kv * hd), "o": w(h * hd, d),
        "embedding": w(s["v"], d),
        "x": rng.standard_normal((b, t, d)).astype(np.float32),
        "cotangent": rng.standard_normal((b, t, d)).astype(np.float32),
        "targets": rng.integers(0, s["v"], size=(b * t,)).astype(np.int32),
        "cos": np.cos(angles), "sin": np.sin(angles),  # [T, hd / 2]
    }


def timed(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after one warm-up call (compilation)."""
    import numpy as np

    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# ---------------------------------------------------------------------------------------------- ours


def run_jax(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from jaxdebate.model.config import LlamaConfig
    from jaxdebate.model.kernels import matmul
    from jaxdebate.model.llama import MLP, Attention, RMSNorm, param_shapes
    from jaxdebate.model.logprobs import hidden_logprobs
    from jaxdebate.rl.optim import AdamWBound, guarded_apply

    cfg, s = LlamaConfig(dot_dtype=args.dot_dtype), shapes(args)
    a = {k: jnp.asarray(v) for k, v in arrays(s).items()}
    b, t = s["b"], s["t"]
    cos, sin = (jnp.broadcast_to(a[k][None], (b, t, s["hd"] // 2)) for k in ("cos", "sin"))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool))[None], (b, t, t))
    norm = RMSNorm(cfg.rms_norm_eps, jnp.float32)

    def mlp(p, x):
        return x + MLP(cfg).apply({"params": p["mlp"]}, norm.apply({"params": {"scale": p["norm"]}}, x))

    def attention(p, x):
        h = norm.apply({"params": {"scale": p["norm"]}}, x)
        out, _ = Attention(cfg).apply({"params": p["attn"]}, h, cos, sin, mask, 0, None, 0)
        return x + out

    def head(p, x):
        lp, ent = hidden_logprobs({"embed_tokens": {"embedding": p["embedding"]}}, cfg, x.reshape(-1, s["d"]),
                                  a["targets"], with_entropy=True)
        return jnp.stack([lp, ent], axis=-1)

    params = {"norm": a["norm"], "embedding": a["embedding"],
              "mlp": {n: {"kernel": a[k]} for n, k in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down"))},
              "attn": {f"{k}_proj": {"kernel": a[k]} for k in "qkvo"}}
    head_cotangent = jnp.ones((b * t, 2), jnp.float32)
    out = {}
    for name, fn, ct in (("mlp", mlp, a["cotangent"]), ("attention", attention, a["cotangent"]),
                         ("head", head, head_cotangent)):
        if name not in args.parts:
            continue
        fwd = jax.jit(fn)

        @jax.jit
        def fwd_bwd(p, x, fn=fn, ct=ct):
            y, vjp = jax.vjp(fn, p, x)
            return y, vjp(ct)

        y = np.asarray(fwd(params, a["x"]))
        out[name] = {"fwd_s": timed(lambda: jax.block_until_ready(fwd(params, a["x"])), args.repeats),
                     "fwd_bwd_s": timed(lambda: jax.block_until_ready(fwd_bwd(params, a["x"])), args.repeats),
                     "out_sum": float(y.sum()), "out_first": y.reshape(-1)[:4].tolist()}
    if "adamw" in args.parts:
        tree = param_shapes(cfg)
        keys = iter(jax.random.split(jax.random.key(0), len(jax.tree.leaves(tree))))
        model = jax.tree.map(lambda sd: 0.02 * jax.random.normal(next(keys), sd.shape, jnp.float32), tree)
        grads = jax.tree.map(lambda p: 1e-3 * jnp.ones_like(p), model)
        tx = optax.adamw(1e-6, weight_decay=0.0)
        bound = AdamWBound(0.9, 0.999, 0.0, max_lr=1e-6)  # the learner's guard, in place
        update = jax.jit(lambda p, o, g: guarded_apply(tx, p, o, g, jnp.float32(0.0), grad_clip=1.0, bound=bound)[:2],
                         donate_argnums=(0, 1))
        state = [model, tx.init(model)]

        def step():
            state[0], state[1] = update(state[0], state[1], grads)
            jax.block_until_ready(state[0])

        out["adamw"] = {"step_s": timed(step, args.repeats),
                        "params": sum(int(np.prod(x.shape)) for x in jax.tree.leaves(model))}
    if "mlp-pieces" in args.parts:
        rows = a["x"].reshape(-1, s["d"])
        gate, up = matmul(rows, a["gate"]), matmul(rows, a["up"])
        gate_up = jnp.concatenate([a["gate"], a["up"]], axis=1)
        pieces = {  # name -> (function, its inputs)
            "norm": (lambda x: norm.apply({"params": {"scale": a["norm"]}}, x), (rows,)),
            "gate GEMM d->f": (matmul, (rows, a["gate"])),
            "gate|up GEMM d->2f": (matmul, (rows, gate_up)),
            "silu(gate)*up": (lambda g, u: jax.nn.silu(g) * u, (gate, up)),
            "down GEMM f->d": (matmul, (jax.nn.silu(gate) * up, a["down"])),
            "whole block": (lambda x: mlp(params, x), (a["x"],)),
        }
        out["mlp-pieces"] = {}
        for name, (fn, inputs) in pieces.items():
            fn = jax.jit(fn)
            out["mlp-pieces"][name] = timed(lambda fn=fn, inputs=inputs: jax.block_until_ready(fn(*inputs)),
                                            args.repeats)
    return out


# --------------------------------------------------------------------------------------------- torch


def run_torch(args) -> dict:
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

    torch.manual_seed(0)
    s = shapes(args)
    a = {k: torch.from_numpy(v) for k, v in arrays(s).items()}
    hf = HFConfig(hidden_size=s["d"], intermediate_size=s["f"], num_attention_heads=s["h"],
                  num_key_value_heads=s["kv"], head_dim=s["hd"], vocab_size=s["v"], rms_norm_eps=1e-5,
                  num_hidden_layers=s["layers"], tie_word_embeddings=True)
    hf._attn_implementation = "sdpa"
    norm = LlamaRMSNorm(s["d"], eps=1e-5)
    mlp_mod, attn_mod = LlamaMLP(hf), LlamaAttention(hf, layer_idx=0)
    with torch.no_grad():
        norm.weight.copy_(a["norm"])
        for mod, names in ((mlp_mod, ("gate", "up", "down")), (attn_mod, "qkvo")):
            for n in names:
                getattr(mod, f"{n}_proj").weight.copy_(a[n].T)  # torch Linear: [out, in]
    b, t = s["b"], s["t"]
    # HF's position embeddings: each half of the head dimension gets the same angle
    cos, sin = (torch.cat([a[k], a[k]], dim=-1)[None].expand(b, t, s["hd"]) for k in ("cos", "sin"))
    embedding = a["embedding"].clone().requires_grad_(True)

    def mlp(x):
        return x + mlp_mod(norm(x))

    def attention(x):
        return x + attn_mod(norm(x), position_embeddings=(cos, sin), attention_mask=None)[0]

    def head(x):
        logp = torch.log_softmax(torch.nn.functional.linear(x.reshape(-1, s["d"]), embedding), dim=-1)
        lp = logp.gather(-1, a["targets"].long()[:, None]).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1)
        return torch.stack([lp, ent], dim=-1)

    head_cotangent = torch.ones((b * t, 2))
    out = {}
    for name, fn, ct in (("mlp", mlp, a["cotangent"]), ("attention", attention, a["cotangent"]),
                         ("head", head, head_cotangent)):
        if name not in args.parts:
            continue
        x = a["x"].clone().requires_grad_(True)

        def fwd(fn=fn):
            with torch.no_grad():
                return fn(a["x"])

        def fwd_bwd(fn=fn, x=x, ct=ct):
            for p in (*norm.parameters(), *mlp_mod.parameters(), *attn_mod.parameters(), embedding, x):
                p.grad = None
            fn(x).backward(ct)

        y = fwd().numpy()
        out[name] = {"fwd_s": timed(fwd, args.repeats), "fwd_bwd_s": timed(fwd_bwd, args.repeats),
                     "out_sum": float(y.sum()), "out_first": y.reshape(-1)[:4].tolist()}
    if "adamw" in args.parts:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(hf)
        for p in model.parameters():
            p.grad = torch.full_like(p, 1e-3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)

        def step():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        out["adamw"] = {"step_s": timed(step, args.repeats), "params": sum(p.numel() for p in model.parameters())}
    if "mlp-pieces" in args.parts:
        linear = torch.nn.functional.linear
        w = {n: getattr(mlp_mod, f"{n}_proj").weight.detach() for n in ("gate", "up", "down")}  # [out, in]
        gate_up = torch.cat([w["gate"], w["up"]], dim=0)
        rows = a["x"].reshape(-1, s["d"])
        gate, up = linear(rows, w["gate"]), linear(rows, w["up"])
        pieces = {
            "norm": (norm, (rows,)),
            "gate GEMM d->f": (linear, (rows, w["gate"])),
            "gate|up GEMM d->2f": (linear, (rows, gate_up)),
            "silu(gate)*up": (lambda g, u: torch.nn.functional.silu(g) * u, (gate, up)),
            "down GEMM f->d": (linear, (torch.nn.functional.silu(gate) * up, w["down"])),
            "whole block": (mlp, (a["x"],)),
        }
        out["mlp-pieces"] = {}
        with torch.no_grad():
            for name, (fn, inputs) in pieces.items():
                out["mlp-pieces"][name] = timed(lambda fn=fn, inputs=inputs: fn(*inputs), args.repeats)
    out["threads"] = torch.get_num_threads()
    return out


# ---------------------------------------------------------------------------------------------- main


def report(s: dict, ours: dict, peer: dict) -> None:
    """Per-part times and ``torch / ours`` (> 1: ours is faster), then each part weighted by how often
    a train step runs it."""
    print(f"\n{'part':<10} {'pass':<9} {'ours (ms)':>10} {'torch (ms)':>11} {'torch/ours':>11}")
    for name in ("mlp", "attention", "head"):
        if name in ours and name in peer:
            for key, label in (("fwd_s", "fwd"), ("fwd_bwd_s", "fwd+bwd")):
                o, p = ours[name][key], peer[name][key]
                print(f"{name:<10} {label:<9} {1e3 * o:10.1f} {1e3 * p:11.1f} {p / o:10.2f}x")
            rel = abs(ours[name]["out_sum"] - peer[name]["out_sum"]) / max(1.0, abs(peer[name]["out_sum"]))
            print(f"{'':<10} forward outputs: sum {ours[name]['out_sum']:.4f} vs {peer[name]['out_sum']:.4f} "
                  f"(relative difference {rel:.1e}); first values ours {_fmt(ours[name]['out_first'])} "
                  f"torch {_fmt(peer[name]['out_first'])}")
    if "mlp-pieces" in ours and "mlp-pieces" in peer:
        print(f"\nthe mlp forward piece by piece, {s['b'] * s['t']} rows x {s['d']} (f = {s['f']}):")
        for name in MLP_PIECES:
            o, p = ours["mlp-pieces"][name], peer["mlp-pieces"][name]
            print(f"  {name:<20} ours {1e3 * o:8.1f} ms  torch {1e3 * p:8.1f} ms  torch/ours {p / o:5.2f}x")
        o, p = ours["mlp-pieces"], peer["mlp-pieces"]
        gemms = ("gate GEMM d->f", "down GEMM f->d")
        print(f"mlp gemm ratio torch/ours (one d->f and the f->d GEMM): {sum(p[k] for k in gemms) / sum(o[k] for k in gemms):.2f}")
    if "adamw" in ours and "adamw" in peer:
        o, p = ours["adamw"]["step_s"], peer["adamw"]["step_s"]
        print(f"{'adamw':<10} {'update':<9} {1e3 * o:10.1f} {1e3 * p:11.1f} {p / o:10.2f}x"
              f"   ({ours['adamw']['params']:,} parameters ours, {peer['adamw']['params']:,} torch)")
    # how often one train step (policy forward + backward, reference forward) runs each part
    weights = {"mlp": (s["layers"], s["layers"]), "attention": (s["layers"], s["layers"]), "head": (1, 1)}
    rows, total_o, total_p = [], 0.0, 0.0
    for name, (n_fwd_bwd, n_fwd) in weights.items():
        if name in ours and name in peer:
            o = n_fwd_bwd * ours[name]["fwd_bwd_s"] + n_fwd * ours[name]["fwd_s"]
            p = n_fwd_bwd * peer[name]["fwd_bwd_s"] + n_fwd * peer[name]["fwd_s"]
            rows.append((name, o, p))
    if "adamw" in ours and "adamw" in peer:
        rows.append(("adamw", ours["adamw"]["step_s"], peer["adamw"]["step_s"]))
    if not rows:
        return
    print(f"\nper train step ({s['layers']} layers: policy fwd+bwd and reference fwd of each layer and of the head, "
          "one update):")
    for name, o, p in rows:
        total_o, total_p = total_o + o, total_p + p
        print(f"  {name:<10} ours {o:6.2f} s  torch {p:6.2f} s  ours - torch {o - p:+6.2f} s")
    print(f"  {'sum':<10} ours {total_o:6.2f} s  torch {total_p:6.2f} s  ours - torch {total_o - total_p:+6.2f} s")
    print(f"layer parts ratio torch/ours (sum of the parts): {total_p / total_o:.2f}")


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after the warm-up (median)")
    parser.add_argument("--dot-dtype", default="compute", choices=("compute", "bfloat16", "bfloat16_grads"),
                        help="ours: model.dot_dtype of the layers' projections (torch stays fp32)")
    parser.add_argument("--side", choices=("jax", "torch"), help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.side:
        print("RESULT " + json.dumps(run_jax(args) if args.side == "jax" else run_torch(args)), flush=True)
        return

    from jaxdebate import host_memory
    from jaxdebate.sampling.hardware import cpu_kind

    env = host_memory.tuned_environ(os.environ) or dict(os.environ)
    s = shapes(args)
    print(f"SmolLM2-135M widths, {args.batch} x {args.length} tokens, median of {args.repeats}, ours with "
          f"model.dot_dtype={args.dot_dtype}; CPU flags: "
          f"{cpu_kind()}; host memory: {host_memory.describe(env)}", flush=True)
    results = {}
    for side in ("jax", "torch"):
        cmd = [sys.executable, __file__, "--side", side, "--parts", *args.parts, "--batch", str(args.batch),
               "--length", str(args.length), "--repeats", str(args.repeats), "--dot-dtype", args.dot_dtype]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.exit(f"{side} side failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        results[side] = json.loads(lines[-1][len("RESULT "):])
        print(f"{side} side done", flush=True)
    report(s, results["jax"], results["torch"])


if __name__ == "__main__":
    main()
