"""Benchmark: one whole run of the arithmetic family through the real command, process start to exit.

    .venv/bin/python bench/family_run.py                                  # configs/arithmetic/identity.py
    .venv/bin/python bench/family_run.py --set training.total_train_steps=2   # a quick look
    .venv/bin/python bench/family_run.py --config configs/smoke.py        # the harness on the tiny model
    .venv/bin/python bench/family_run.py --shared-server                  # as a sweep's later runs: on its server

Runs ``python -m jaxdebate.launch`` in a child process (a fresh workdir, the persistent XLA cache of
a normal run unless ``--cold``) and splits its wall time into: start-up (interpreter, imports, data,
model load: everything before the first phase the trainer times), compilation (XLA backend compile
time, from JAX's monitoring events, wherever it happened), and the trainer's own phases summed over
the run from ``metrics.jsonl`` (sampling, learning, validation, sync, checkpoint; each includes the
compilation that happened inside it). The last line is ``family run: <seconds> s``, printed with the
CPU flags, so before/after figures of the same machine can be compared (bench/README "family_run").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("sampling", "learning", "validation", "sync", "checkpoint")

# The child: count XLA compile time through JAX's monitoring hook, then run the real launcher.
_CHILD = """
import json, sys, time
start = time.perf_counter()
import jax
compiled = [0.0]
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiled.__setitem__(0, compiled[0] + seconds) if "backend_compile" in event else None)
from jaxdebate.launch import main
code = main(sys.argv[1:])
print("BENCH " + json.dumps({"code": code, "compile_s": compiled[0], "child_s": time.perf_counter() - start}))
sys.exit(code)
"""


def run(config: str, overrides: list[str], workdir: Path, *, cold: bool, extra_env: dict[str, str]) -> dict:
    from jaxdebate import host_memory

    # the environment `python -m jaxdebate.launch` re-executes itself with (the child calls main() directly)
    env = dict(host_memory.tuned_environ(os.environ) or os.environ, **extra_env)
    if cold:
        env["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="family-run-xla-")
    argv = [sys.executable, "-c", _CHILD, "--config", config, "--workdir", str(workdir),
            "--set", "logging.progress_bar=false", *overrides]
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCH ")), None)
    if out.returncode != 0 or line is None:
        sys.exit(f"the run failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    child = json.loads(line[len("BENCH "):])
    records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    phases = {p: sum(r.get(f"time/{p}", 0.0) for r in records) for p in PHASES}
    steps = [r for r in records if "time/step" in r]
    return {"wall_s": wall, "compile_s": child["compile_s"], "phases": phases, "steps": len(steps),
            "startup_s": wall - sum(phases.values()),
            "step_s": [round(r["time/step"], 1) for r in steps],
            "final": {k: v for k, v in (records[-1] if records else {}).items() if k.startswith("val/") and "/accuracy" in k}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/arithmetic/identity.py")
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--cold", action="store_true", help="an empty XLA cache (compile everything)")
    parser.add_argument("--keep", help="keep the run's workdir here instead of a temporary one")
    parser.add_argument("--shared-server", action="store_true",
                        help="start the vLLM server first, untimed, and run on it, as a local sweep's runs do")
    args = parser.parse_args(argv)
    from jaxdebate.configlib import apply_overrides, load_config
    from jaxdebate.sampling.hardware import cpu_kind
    from jaxdebate.sweep_server import SweepServer

    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="family-run-")) / "run"
    with SweepServer(Path(tempfile.mkdtemp(prefix="family-run-server-"))) if args.shared_server else (
            contextlib.nullcontext()) as server:
        extra_env = server.env_for(apply_overrides(load_config(args.config), args.overrides)) if server else {}
        if server and not extra_env:
            sys.exit("--shared-server: this config does not sample on a vLLM server it would start")
        result = run(args.config, args.overrides, workdir, cold=args.cold, extra_env=extra_env)
    print(json.dumps(result, indent=1))
    split = ", ".join([f"start-up {result['startup_s']:.0f} s"]
                      + [f"{p} {s:.0f} s" for p, s in result["phases"].items()]
                      + [f"(XLA compile {result['compile_s']:.0f} s inside these)"])
    print(f"{args.config} {' '.join(args.overrides)}: {result['steps']} steps; {split}; CPU flags: {cpu_kind()}")
    print(f"family run: {result['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
