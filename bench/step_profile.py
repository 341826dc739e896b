"""Benchmark: where one learner step's time goes, from a ``jax.profiler`` trace of the real update.

Each ``--variants`` entry (the ``jax-*`` variants of bench/train_step.py, on its workload: uniform 8 x
512 by default) runs in its own process with the launcher's host memory: two untimed-in-the-trace
steps (the first compiles), then one step under ``jax.profiler``. From the trace (XLA:CPU records
every executed HLO op with its module) and the compiled programs' HLO metadata it prints:

- the traced step's wall time next to the untraced one's, and how long each XLA worker thread was
  busy (its thread-pool regions and ops) and how long all were at once: all busy for most of the step
  means the step is bound by its arithmetic, not by waiting on Python, the scheduler or memory
  allocation;
- the step's wall time split over its ops by part (MLP; attention projections; attention core:
  scores, softmax, mask, RoPE and layouts; the layers' other ops: norms, residuals, embedding; the
  output head and loss; the optimiser) x pass (forward / backward) x kind (GEMM = a dot; other =
  element-wise, reductions, copies). An op running alone spreads over both cores (intra-op
  threads); XLA also runs independent ops side by side, one per thread, so each instant of the step
  is shared equally among the ops running then: the shares add up to the time any op ran;
- the ops' JAX call paths that took longest (every layer's copy of an op shares one path), and each
  variant's traced step against the first variant's.

    .venv/bin/python bench/step_profile.py                                  # jax-fp32, jax-fp32-bf16grads
    .venv/bin/python bench/step_profile.py --variants jax-fp32 --top 25
    XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false .venv/bin/python bench/step_profile.py
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import train_step  # bench/train_step.py: the workload and our side of each variant
from common import child_result

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = tuple(v for v in train_step.VARIANTS if v.startswith("jax"))
PARTS = ("mlp", "attention projections", "attention core", "layers, other", "head and loss", "optimiser",
         "unattributed")
_OP = re.compile(r'^\s*(?:ROOT )?%(\S+) = .*?op_name="([^"]*)"', re.M)


def op_names(hlo_text: str) -> dict[str, str]:
    """HLO op name -> its ``op_name`` metadata (the JAX call path) in a compiled program's text."""
    return {m.group(1): m.group(2) for m in _OP.finditer(hlo_text)}


def category(module: str, path: str | None) -> tuple[str, str, str]:
    """``(part, pass, kind)`` of one op, from its module and JAX call path (None: no metadata)."""
    if "apply" in module:
        part = "optimiser"
    elif path is None:
        part = "unattributed"
    elif "/mlp/" in path:
        part = "mlp"
    elif "self_attn" in path:
        part = "attention projections" if "_proj/" in path else "attention core"
    elif "Llama" in path:
        part = "layers, other"
    else:
        part = "head and loss"
    pass_ = "update" if part == "optimiser" else "backward" if path and "transpose(" in path else "forward"
    return part, pass_, "GEMM" if path and "dot_general" in path else "other"


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(intervals) -> int:
    return sum(e - s for s, e in intervals)


def _intersection(a, b) -> list[tuple[int, int]]:
    """The intervals both sorted, disjoint interval lists ``a`` and ``b`` cover."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def shared_time(spans) -> dict[int, float]:
    """Each span's share of the wall time: every instant split equally among the spans open then."""
    edges = sorted([(start, 1, i) for i, (start, _, _, _) in enumerate(spans)]
                   + [(end, -1, i) for i, (_, end, _, _) in enumerate(spans)])
    share: dict[int, float] = collections.defaultdict(float)
    active: set[int] = set()
    last = None
    for t, kind, i in edges:
        if active and last is not None and t > last:
            for j in active:
                share[j] += (t - last) / len(active)
        last = t
        if kind > 0:
            active.add(i)
        else:
            active.discard(i)
    return share


def summarise(trace_dir: str, programs: dict[str, str]) -> dict:
    """Thread busy times and the step's wall time by category and call path (:func:`shared_time`) from
    the trace in ``trace_dir``; ``programs`` maps part of an HLO module's name (``accumulate``,
    ``apply``) to its compiled text."""
    from jax.profiler import ProfileData

    files = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not files:
        raise RuntimeError(f"no trace written under {trace_dir}")
    plane = next(p for p in ProfileData.from_file(files[0]).planes if p.name == "/host:CPU")
    paths = {module: op_names(text) for module, text in programs.items()}
    spans = []  # (start, end, category, call path or else op name) of every innermost op on either thread
    busy = []
    for line in plane.lines:
        if "XLAEigen" not in line.name:  # XLA's intra-op worker threads
            continue
        regions, ops, start = [], [], None
        for ev in sorted(line.events, key=lambda e: e.start_ns):
            if ev.name == "ThreadpoolListener::StartRegion":
                start = ev.start_ns
            elif ev.name == "ThreadpoolListener::StopRegion" and start is not None:
                regions.append((start, ev.start_ns))
                start = None
            stats = dict(ev.stats)
            if "hlo_op" in stats and ev.duration_ns > 0:
                ops.append((int(ev.start_ns), int(ev.start_ns + ev.duration_ns), stats["hlo_op"],
                            stats.get("hlo_module", "")))
        # a while/conditional op's event spans the ops it runs: count the innermost ones only
        for i, (s, e, op, module) in enumerate(ops):
            if i + 1 < len(ops) and ops[i + 1][0] < e:
                continue
            path = next((p[op] for m, p in paths.items() if m in module and op in p), None)
            spans.append((s, e, category(module, path), path or op))
        busy.append(_union(regions + [(s, e) for s, e, _, _ in ops]))
    all_busy = functools.reduce(_intersection, busy) if busy else []
    any_busy = _length(_union([iv for b in busy for iv in b]))
    with_op = _length(_union([(s, e) for s, e, _, _ in spans]))
    by_cat: collections.Counter = collections.Counter()
    by_path: collections.Counter = collections.Counter()  # an unrolled layer stack's 30 copies share a path
    for i, share in shared_time(spans).items():
        by_cat[spans[i][2]] += share
        by_path[spans[i][3]] += share
    return {"busy_s": [_length(b) / 1e9 for b in busy], "all_busy_s": _length(all_busy) / 1e9,
            "no_op_s": (any_busy - with_op) / 1e9,
            "categories": [[*k, v / 1e9] for k, v in by_cat.items()],
            "paths": [[path, v / 1e9] for path, v in by_path.most_common(60)]}


def run_child(args) -> dict:
    import jax

    from jaxdebate.sampling.hardware import cpu_kind

    learner, state, mbs, _, _, _ = train_step.jax_step(args)
    times = []
    for _ in range(2):  # the first compiles
        t0 = time.perf_counter()
        state, _ = learner.update(state, mbs)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - t0)
    # the compiled programs' text names each op's JAX call path (compiled again here: XLA's
    # compilation is deterministic, so the names are the ones the steps ran); with micro-batches of
    # several shapes the first one's program names the ops
    grads = jax.tree.map(jax.numpy.zeros_like, state.params)
    programs = {"accumulate": learner._accumulate.lower(state.params, state.ref_params, grads, mbs[0],
                                                        learner.base).compile().as_text(),
                "apply": learner._apply.lower(state, grads, jax.numpy.float32(0.0)).compile().as_text()}
    del grads
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        t0 = time.perf_counter()
        state, _ = learner.update(state, mbs)
        jax.block_until_ready(state.params)
        traced = time.perf_counter() - t0
        jax.profiler.stop_trace()
        out = summarise(trace_dir, programs)
    return {**out, "step_s": times[-1], "first_step_s": times[0], "traced_s": traced, "cpu": cpu_kind()}


def report(variant: str, r: dict, top: int) -> None:
    busy = ", ".join(f"{b:.1f}" for b in r["busy_s"])
    print(f"{variant}: traced step {r['traced_s']:.2f} s (untraced {r['step_s']:.2f} s, first "
          f"{r['first_step_s']:.1f} s); XLA threads busy {busy} s, all {len(r['busy_s'])} at once "
          f"{r['all_busy_s']:.1f} s")
    table: dict = collections.defaultdict(float)
    for part, pass_, kind, seconds in r["categories"]:
        table[(part, pass_, kind)] += seconds
    total = sum(table.values())
    print(f"  {'wall time (s) by part':<24}{'pass':<10}{'GEMM':>10}{'other':>11}")
    for part in PARTS:
        for pass_ in ("forward", "backward", "update"):
            gemm, other = table.get((part, pass_, "GEMM"), 0.0), table.get((part, pass_, "other"), 0.0)
            if gemm + other >= 0.005:
                print(f"  {part:<24}{pass_:<10}{gemm:>10.2f}{other:>11.2f}")
    gemm = sum(v for (_, _, kind), v in table.items() if kind == "GEMM")
    print(f"  ops ran {total:.1f} s: GEMMs {gemm:.1f} s ({100 * gemm / max(total, 1e-9):.0f}%), "
          f"other {total - gemm:.1f} s; threads busy with no op open {r['no_op_s']:.1f} s (XLA's Eigen dots "
          "return at dispatch and finish on the pool: the fp32 weight gradients' GEMMs are there)")
    for path, seconds in r["paths"][:top]:
        print(f"    {seconds:7.2f} s  {path.replace('jit(_accumulate_impl)/', '')[-110:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["jax-fp32", "jax-fp32-bf16grads"])
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # child process
    train_step.add_workload_args(parser)
    parser.add_argument("--top", type=int, default=12, help="longest call paths listed per variant")
    args = parser.parse_args()
    if args.variant:
        print("RESULT " + json.dumps(run_child(args)), flush=True)
        return

    train_step.hf_dir()  # export once, before any timed child
    from jaxdebate import host_memory

    env = host_memory.tuned_environ(dict(os.environ)) or dict(os.environ)
    print(f"host memory: {host_memory.describe(env)}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    results = {}
    for variant in args.variants:
        cmd = [sys.executable, __file__, "--variant", variant, *train_step.workload_argv(args)]
        result = child_result(cmd, cwd=ROOT, env=env, label=variant)
        if result is None:
            continue
        results[variant] = result
        if len(results) == 1:
            print(f"CPU: {results[variant]['cpu']}")
        report(variant, results[variant], args.top)
    names = list(results)  # the variants that ran, the first of them the peer
    for variant in names[1:]:
        r, first = results[variant], results[names[0]]
        print(f"traced step {variant}/{names[0]}: {r['traced_s'] / first['traced_s']:.2f} "
              f"(untraced {r['step_s'] / first['step_s']:.2f})")


if __name__ == "__main__":
    main()
