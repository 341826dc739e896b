"""Run one experiment: ``python -m jaxdebate.launch --config configs/coma.py [--workdir DIR] [--set k=v ...]``.

Overrides are ``section.field=value`` (Python literal or JSON values; see :mod:`jaxdebate.config`),
e.g. ``--set training.total_train_steps=2 loss.beta=0.05 shaping.params.alpha=0.3``. The config is
built and validated before anything is loaded; an invalid one exits with status 2 and a message naming
the field. A workdir that holds a checkpoint is resumed (``--no-resume``, or
``checkpoint.resume=false``, refuses to touch it).

Several processes (one per host or GPU) train one experiment on JAX's multi-process runtime: started
by SLURM (``srun``; detected from its environment) or by hand with ``--coordinator HOST:PORT
--num-processes N --process-id I`` on each. ``launch.training_devices`` is then the global device
count; process 0 samples, logs and writes metrics (README: Scaling out).

Exit status: 0 finished, 130 interrupted (checkpointed), 2 invalid config (or a workdir in use by
another trainer, or a resume whose config differs), 1 other errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jaxdebate import distributed, host_memory
from jaxdebate.errors import ConfigError, JaxDebateError, RunError

if TYPE_CHECKING:
    from jaxdebate.config import Config

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jaxdebate.launch",
        description="Train a debating LLM with one reward-shaping strategy (DESIGN §5, §7).",
    )
    parser.add_argument("--config", required=True, help="a Python file with get_config(), e.g. configs/coma.py")
    parser.add_argument("--workdir", help="run directory (default: runs/<config name>); resumed if it holds a checkpoint")
    parser.add_argument("--set", dest="overrides", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="override config fields, e.g. --set loss.beta=0.05 training.total_train_steps=2")
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="more overrides")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate the config and resolve the datasets, then exit without training")
    parser.add_argument("--no-resume", action="store_true",
                        help="fail instead of resuming when the workdir already holds a checkpoint")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="resume even though the config differs in fields that change what a step "
                             "computes (the change is recorded in WORKDIR/config_history.jsonl)")
    group = parser.add_argument_group("multi-process training (jax.distributed; SLURM is detected without these)")
    group.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address, the same on every process")
    group.add_argument("--num-processes", type=int, metavar="N", help="how many processes train this run")
    group.add_argument("--process-id", type=int, metavar="I", help="this process's index, 0 .. N-1")
    return parser


def default_workdir(config_path: str) -> Path:
    return Path("runs") / Path(config_path).stem


def check_workdir(workdir: Path) -> None:
    """ConfigError naming the path unless ``workdir`` is (or can be created as) a writable directory;
    checked before any model load and without creating anything, so ``--dry-run`` checks it too."""
    if workdir.exists() and not workdir.is_dir():
        raise ConfigError(f"--workdir {workdir} is an existing file, not a directory")
    if workdir.is_symlink() and not workdir.exists():
        raise ConfigError(f"--workdir {workdir} is a dangling symbolic link")
    existing = workdir
    while not existing.exists():  # the nearest ancestor that exists must be a writable directory
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != workdir and not existing.is_dir():
        raise ConfigError(f"--workdir {workdir} cannot be created: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == workdir else f"cannot be created: {existing} is not writable"
        raise ConfigError(f"--workdir {workdir} {what}")


DETERMINISTIC_GPU_OPS = "--xla_gpu_deterministic_ops"


def set_xla_flags(config: Config, environ: dict[str, str] | None = None) -> None:
    """Add ``launch.deterministic_gpu_ops`` to ``XLA_FLAGS``; XLA reads the variable when JAX starts its
    backend, so call this before any JAX work (``main`` does; the variable also reaches the processes
    it starts). ConfigError when ``XLA_FLAGS`` already sets the flag the other way: the run would record
    one setting and run with the other."""
    environ = os.environ if environ is None else environ
    want = config.launch.deterministic_gpu_ops
    flags = environ.get("XLA_FLAGS", "").split()
    for flag in flags:
        name, eq, value = flag.partition("=")
        if name == DETERMINISTIC_GPU_OPS:
            given = not eq or value.lower() in ("true", "1")
            if given != want:
                raise ConfigError(f"XLA_FLAGS has {flag} but the config has launch.deterministic_gpu_ops={want}; "
                                  f"drop the flag from XLA_FLAGS or --set launch.deterministic_gpu_ops={given}")
            return
    environ["XLA_FLAGS"] = " ".join([*flags, f"{DETERMINISTIC_GPU_OPS}={str(want).lower()}"])


CACHE_MIN_COMPILE_S = 0.5  # JAX's default (1 s) leaves a small run's many sub-second programs uncached


def enable_compilation_cache() -> None:
    """Keep XLA executables across runs (under ``$JAXDEBATE_CACHE/xla`` unless
    ``JAX_COMPILATION_CACHE_DIR`` is set), every one that took ``CACHE_MIN_COMPILE_S`` or more to
    compile unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` is set: a run's first step otherwise
    recompiles what the last run of the same shapes already compiled."""
    import jax

    if not os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_S)
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    from jaxdebate.model.sources import cache_dir

    jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "xla"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from jaxdebate.config import Config
    from jaxdebate.configlib import format_config, load_config

    overrides = [*args.overrides, *args.overrides_positional]
    workdir = Path(args.workdir) if args.workdir else default_workdir(args.config)
    try:
        config = load_config(args.config, overrides, expected=Config)
        if args.print_config:
            print(format_config(config))
            return EXIT_OK
        set_xla_flags(config)
        check_workdir(workdir)
        group = distributed.detect(args.coordinator, args.num_processes, args.process_id)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        from jaxdebate.sampling.factory import choose_backend, describe

        backend, why = choose_backend(config.sampler, warn=False)  # sampler.fallback=error fails here
        if args.dry_run:
            train, val = config.data.load()
            from jaxdebate.model import load_tokenizer
            from jaxdebate.rl.preflight import check_prompts_fit

            transfer = config.data.load_transfer(train)
            budget = check_prompts_fit(config, load_tokenizer(config.model.source), train, val, transfer)
            print(f"config ok: {args.config} -> {workdir}; {len(train)} training items, {len(val)} validation "
                  f"items, {len(transfer)} transfer items, every round-1 prompt within {budget} tokens; up to {config.samples_per_step} "
                  f"training samples per step; {describe(config.sampler, backend, why)}")
            return EXIT_OK
        from jaxdebate.checkpointer import START_OVER, latest_step
        from jaxdebate.train import train as run_training

        enable_compilation_cache()
        print(f"[jaxdebate] host memory: {host_memory.describe()}", file=sys.stderr)
        if group is not None:
            distributed.initialize(group)
            print(f"[jaxdebate] process {group.process_id} of {group.num_processes} ({group.source})",
                  file=sys.stderr)

        existing = latest_step(workdir)
        if existing is not None:
            if args.no_resume or not config.checkpoint.resume:
                why = "--no-resume was given" if args.no_resume else "checkpoint.resume is false"
                print(f"error: {workdir} holds a checkpoint (step {existing}) and {why}: {START_OVER}",
                      file=sys.stderr)
                return EXIT_ERROR
            print(f"[jaxdebate] resuming {workdir} from step {existing}", file=sys.stderr)
        result = run_training(config, workdir, allow_config_change=args.allow_config_change)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except JaxDebateError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("[jaxdebate] stopped without a checkpoint (second interrupt)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"[jaxdebate] {result.status} at step {result.step}; outputs in {result.workdir}", file=sys.stderr)
    return EXIT_INTERRUPTED if result.status == "interrupted" else EXIT_OK


if __name__ == "__main__":
    host_memory.reexec_with_tuned_malloc()  # before any work: glibc reads its tunables at start-up
    sys.exit(main())
