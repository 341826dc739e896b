"""The five-strategy sweep: strategy configs × seeds, run locally one after another or on SLURM.

Every run is one ``python -m jaxdebate.launch`` process with its own workdir
``<sweep_dir>/<config-stem>-seed<seed>``; the sweep keeps a small ``run.json`` there (status, attempts,
wall time, job id). Re-launching a sweep skips runs whose status is ``done`` and re-runs the others:
the trainer resumes them from their last orbax checkpoint. ``--base`` swaps everything except the
shaping section for another config (e.g. ``configs/smoke.py``), which is how CI sweeps tiny models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import resource
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.analysis import aligned_table
from jaxdebate.checkpointer import checkpoint_dir
from jaxdebate.config import LaunchConfig
from jaxdebate.configlib import apply_overrides, load_config, to_dict
from jaxdebate.errors import ConfigError
from jaxdebate.processes import pid_alive
from jaxdebate.provenance import provenance
from jaxdebate.sweep_plan import REPO_ROOT, RunSpec
from jaxdebate.sweep_runs import final_metrics
from jaxdebate.sweep_server import SweepServer

EXECUTORS = ("local", "submitit_local", "slurm")
RUN_FILE = "run.json"
KEEP_CHECKPOINTS = ("all", "last", "none")  # what a finished run keeps of its orbax checkpoints
EXIT_OK, EXIT_INTERRUPTED = 0, 130  # python -m jaxdebate.launch: finished / interrupted (checkpointed)


# ---------------------------------------------------------------------------------------------------
# Run state on disk
# ---------------------------------------------------------------------------------------------------


def read_state(workdir: str | Path) -> dict[str, Any]:
    """The run's ``run.json`` (``{"status": "pending"}`` when it has never started)."""
    path = Path(workdir) / RUN_FILE
    if not path.is_file():
        return {"status": "pending"}
    try:
        return json.loads(path.read_text())
    except ValueError:
        return {"status": "pending", "note": f"unreadable {path}"}


def write_state(workdir: str | Path, state: dict[str, Any]) -> None:
    path = Path(workdir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def effective_status(spec: RunSpec) -> str:
    """``done`` / ``running`` (a live process owns it) / ``interrupted`` / ``failed`` / ``pending``."""
    state = read_state(spec.workdir)
    status = state.get("status", "pending")
    if status == "running":
        if state.get("host") == os.uname().nodename and not pid_alive(state.get("pid")):
            return "interrupted"
        return "running"
    return status


def check_finished_runs(runs: Iterable[RunSpec]) -> None:
    """A finished run is skipped only when it ran what its spec asks for now: a relaunch with other
    overrides or another config would otherwise mix both designs in one sweep. ConfigError naming
    each run and field (cluster scheduling, logging and checkpoint retention may differ)."""
    from jaxdebate.rl.config_history import changes, is_safe, last_config

    differ = []
    for spec in runs:
        ran = last_config(spec.workdir) if effective_status(spec) == "done" else None
        if ran is None:
            continue
        wanted = apply_overrides(load_config(spec.config_path), list(spec.overrides))
        found = [(p, b, a) for p, b, a in changes(wanted, ran) if p == "training.total_train_steps" or not is_safe(p)]
        if found:
            differ.append(f"{spec.name} finished with " + ", ".join(f"{p}={b!r} (now {a!r})" for p, b, a in found[:4])
                          + (f" and {len(found) - 4} more" if len(found) > 4 else ""))
    if differ:
        raise ConfigError(f"{len(differ)} finished run(s) of this sweep ran another config than the one asked "
                          f"for now: {'; '.join(differ)}. Use another --sweep-dir, or the original command")


# ---------------------------------------------------------------------------------------------------
# Executing one run (used by every executor, including inside a SLURM job)
# ---------------------------------------------------------------------------------------------------


def task_rank(env: dict[str, str] | None = None) -> int:
    """This task's rank in a multi-task SLURM job step (0 otherwise): every task runs the training
    process (``jax.distributed``), task 0 alone keeps the run's state and main log."""
    env = os.environ if env is None else env
    return int(env.get("SLURM_PROCID", "0")) if int(env.get("SLURM_NTASKS", "1")) > 1 else 0


def execute(spec: RunSpec, *, echo: bool = True, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run one spec to completion in a child process (``env`` added to its environment); returns its
    final state.

    Output goes to ``<workdir>/launch.log`` (and the terminal when ``echo``). SIGTERM/SIGINT to this
    process are forwarded to the child, which checkpoints before exiting. In task ``r > 0`` of a
    multi-node job the child's output goes to ``launch.task<r>.log`` and the run state is left to task 0.
    """
    workdir = Path(spec.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rank = task_rank()
    if rank > 0:
        returncode = _run_child(spec, workdir / f"launch.task{rank}.log", echo=False,
                                header=f"task {rank} at {time.ctime()}")
        return {"status": "task", "rank": rank, "returncode": returncode}
    state = read_state(workdir)
    attempts = int(state.get("attempts", 0)) + 1
    started = time.time()
    # every attempt's code and machine: a run resumed elsewhere, or at another commit, says so
    attempt = {"attempt": attempts, "started_at": started, **provenance()}
    state.update(
        name=spec.name, config=spec.config_path, seed=spec.seed, overrides=list(spec.overrides),
        status="running", attempts=attempts, started_at=started, pid=os.getpid(),
        command=shlex.join(spec.command()), **{k: attempt[k] for k in ("commit", "dirty", "cpu_flags", "host")},
        history=[*state.get("history", []), attempt],
    )
    write_state(workdir, state)
    cpu_before = _children_cpu_seconds()
    returncode = _run_child(spec, workdir / "launch.log", echo=echo, env=env,
                            header=f"attempt {attempts} at {time.ctime(started)}: {state['command']}")
    wall = float(state.get("wall_time_s", 0.0)) + time.time() - started
    # CPU seconds (user + system) of the training process: a cost that other load on the machine
    # does not inflate the way it inflates wall time
    cpu = float(state.get("cpu_time_s", 0.0)) + _children_cpu_seconds() - cpu_before
    status = {EXIT_OK: "done", EXIT_INTERRUPTED: "interrupted"}.get(returncode, "failed")
    if returncode < 0:  # killed by a signal: resumable from its last checkpoint
        status = "interrupted"
    state.update(
        status=status,
        returncode=returncode, finished_at=time.time(), wall_time_s=wall, cpu_time_s=cpu, pid=None,
    )
    write_state(workdir, state)
    return state


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_child(spec: RunSpec, log_path: Path, *, echo: bool, header: str,
               env: Mapping[str, str] | None = None) -> int:
    """The run's launch command in a child process, its output appended to ``log_path``; its exit status."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    # Runs of one sweep compile the same programs: share XLA's persistent compilation cache.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(spec.workdir).parent / ".jax_cache"))
    with open(log_path, "a") as log:
        log.write(f"\n=== {header}\n")
        log.flush()
        proc = subprocess.Popen(
            spec.command(), cwd=str(REPO_ROOT), env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1,
        )

        def forward(signum, _frame):
            proc.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for line in proc.stdout:
                log.write(line)
                if echo:
                    sys.stdout.write(f"[{spec.name}] {line}")
                    sys.stdout.flush()
            return proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


class SubmititRun:
    """The callable a submitit job runs: one :func:`execute`; on SLURM preemption or time-out it
    requeues itself, and the requeued job resumes the run from its last checkpoint."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any]:
        return execute(self.spec, echo=True)

    def checkpoint(self, *args: Any, **kwargs: Any):  # submitit's requeue hook
        import submitit

        return submitit.helpers.DelayedSubmission(SubmititRun(self.spec))


def slurm_parameters(launch: dict[str, Any], name: str) -> dict[str, Any]:
    """submitit ``update_parameters`` arguments from a run's launch section.

    The priority class maps to the SLURM QoS unless ``qos`` is given explicitly; it is also kept in
    the job comment so it shows in ``squeue -o %k``.
    """
    launch = to_dict(LaunchConfig(**launch))  # validates
    params: dict[str, Any] = {
        "name": name,
        "slurm_partition": launch["partition"],
        "gpus_per_node": launch["gpus_per_node"],
        "cpus_per_task": launch["cpus_per_task"],
        "mem_gb": launch["mem_gb"],
        "timeout_min": launch["time_limit_minutes"],
        "slurm_qos": launch["qos"] or launch["priority"],
        "slurm_comment": f"priority={launch['priority']}",
        "tasks_per_node": launch["tasks_per_node"],
        "nodes": launch["nodes"],
    }
    if launch["tasks_per_node"] > 1 and launch["gpus_per_node"]:
        # one training process per task, each pinned to its own GPUs (SLURM sets CUDA_VISIBLE_DEVICES)
        params["slurm_gpus_per_task"] = launch["gpus_per_node"] // launch["tasks_per_node"]
    if launch.get("account"):
        params["slurm_account"] = launch["account"]
    return params


def choose_executor(runs: Sequence[RunSpec], requested: str | None = None) -> str:
    """``requested`` (``--executor``) if given, else the runs' own ``launch.executor``, which must agree:
    a family whose config says ``slurm`` is submitted without repeating it on the command line."""
    if requested is not None:
        if requested not in EXECUTORS:
            raise ConfigError(f"unknown executor {requested!r} (choose from {', '.join(EXECUTORS)})")
        return requested
    kinds = sorted({spec.launch["executor"] for spec in runs})
    if len(kinds) > 1:
        named = ", ".join(f"{k} ({next(s.name for s in runs if s.launch['executor'] == k)}, ...)" for k in kinds)
        raise ConfigError(f"the runs' launch.executor values differ: {named}; give --executor")
    return kinds[0] if kinds else "local"


def make_executor(kind: str, folder: str | Path, spec: RunSpec):
    """A submitit executor for one run (``slurm`` or ``submitit_local``) with its parameters set."""
    import submitit

    folder = Path(folder)
    if kind == "slurm":
        executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        executor.update_parameters(**slurm_parameters(spec.launch, spec.name))
    elif kind == "submitit_local":
        executor = submitit.LocalExecutor(folder=str(folder))
        executor.update_parameters(timeout_min=int(spec.launch.get("time_limit_minutes", 240)))
    else:
        raise ConfigError(f"unknown executor {kind!r} (choose from {', '.join(EXECUTORS)})")
    return executor


# ---------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------


def run_sweep(
    runs: Sequence[RunSpec],
    *,
    executor: str = "local",
    sweep_dir: str | Path,
    wait: bool = True,
    echo: bool = True,
    after_run: Callable[[RunSpec, dict[str, Any]], None] | None = None,
    deadline: float | None = None,
    keep_checkpoints: str = "all",
    share_server: bool = True,
) -> list[dict[str, Any]]:
    """Run (or submit) every unfinished run; return one summary row per run. ``after_run(spec,
    state)`` is called after each local run ends (e.g. to export the results so far).

    ``share_server`` (local executor): runs that would each start the same vLLM server sample on one
    that the sweep starts and keeps (``jaxdebate.sampling.vllm.shared``), which saves each run its start.

    ``keep_checkpoints`` (``all``, ``last`` or ``none``): what a finished run keeps of its orbax
    checkpoints, applied here to every run found or left ``done`` (local executor); see
    ``prune_checkpoints``.

    ``deadline`` (epoch seconds, local executor): a seed block (consecutive runs of one seed) is not
    begun here unless its unfinished runs are expected to end before it, at the mean wall time of the
    sweep's finished runs; a block begun here is finished. One block then runs on one machine, and a
    session with a time limit stops between blocks instead of in the middle of one."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r} (choose from {', '.join(EXECUTORS)})")
    if keep_checkpoints not in KEEP_CHECKPOINTS:
        raise ConfigError(f"unknown keep_checkpoints {keep_checkpoints!r} (choose from {', '.join(KEEP_CHECKPOINTS)})")
    check_finished_runs(runs)
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep.json").write_text(
        json.dumps({"executor": executor, "runs": [dataclasses.asdict(r) for r in runs]}, indent=2)
    )
    sharing = share_server and executor == "local"
    jobs = []
    with SweepServer(sweep_dir / "shared-server") if sharing else contextlib.nullcontext() as shared:
        begun: set[int] = set()  # seeds whose block this call has begun
        for i, spec in enumerate(runs, 1):
            status = effective_status(spec)
            if status == "done":
                print(f"[sweep] {i}/{len(runs)} {spec.name}: finished, skipped", flush=True)
                _prune_finished(spec, keep_checkpoints)
                continue
            if status == "running":
                print(f"[sweep] {i}/{len(runs)} {spec.name}: running elsewhere, skipped", flush=True)
                continue
            if deadline is not None and executor == "local" and spec.seed not in begun:
                need, left = block_seconds(runs, i - 1), deadline - time.time()
                if need is not None and need > left:
                    print(f"[sweep] stopping before {spec.name}: the rest of seed {spec.seed}'s block needs "
                          f"~{need / 60:.0f} min, {max(left, 0) / 60:.0f} min left before the deadline", flush=True)
                    break
            begun.add(spec.seed)
            verb = "resuming" if status in ("interrupted", "failed") else "starting"
            print(f"[sweep] {i}/{len(runs)} {spec.name}: {verb} ({executor})", flush=True)
            if executor == "local":
                env = shared.env_for(apply_overrides(load_config(spec.config_path), spec.overrides)) if shared else {}
                state = execute(spec, echo=echo, env=env)
                if state.get("status") == "done":
                    _prune_finished(spec, keep_checkpoints)
                if after_run is not None:
                    after_run(spec, state)
                continue
            job = make_executor(executor, sweep_dir / "submitit", spec).submit(SubmititRun(spec))
            state = read_state(spec.workdir)
            state.update(name=spec.name, job_id=str(job.job_id), executor=executor)
            if executor == "slurm":
                state["status"] = "submitted"
            write_state(spec.workdir, state)
            jobs.append((spec, job))
            if executor == "submitit_local" and wait:
                # One at a time: local runs share this machine's cores and memory.
                job.result()
    if executor == "slurm" and wait:
        for _spec, job in jobs:
            job.wait()
    return run_statuses(runs)


def prune_checkpoints(workdir: str | Path, keep: str) -> int:
    """Delete a finished run's orbax checkpoint steps: all but the newest (``last``) or every one
    (``none``); return the bytes freed. A run of the arithmetic family leaves ~3 GB of them and a
    powered sweep has hundreds of runs, while its analysis reads only the metrics and the per-item
    validation rows, which stay (a run is re-made from its commit, config and seed)."""
    if keep not in KEEP_CHECKPOINTS:
        raise ConfigError(f"unknown keep_checkpoints {keep!r} (choose from {', '.join(KEEP_CHECKPOINTS)})")
    root = checkpoint_dir(workdir)
    if keep == "all" or not root.is_dir():
        return 0
    steps = sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    doomed = steps if keep == "none" else steps[:-1]
    freed = 0
    for path in doomed:
        freed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path)
    return freed


def _prune_finished(spec: RunSpec, keep: str) -> None:
    freed = prune_checkpoints(spec.workdir, keep)
    if freed:
        print(f"[sweep] {spec.name}: kept {keep} of its checkpoints, {freed / 2**30:.1f} GiB freed", flush=True)


def parse_deadline(text: str) -> float:
    """Epoch seconds of ``+MINUTES`` (from now) or an ISO date-time (local time unless it names a zone)."""
    try:
        if text.startswith("+"):
            return time.time() + 60 * float(text[1:])
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ConfigError(f"--deadline must be +MINUTES or an ISO time like 2026-11-26T01:00, got {text!r}") from None


def block_seconds(runs: Sequence[RunSpec], start: int) -> float | None:
    """Expected wall seconds of the unfinished runs in the block (the consecutive runs of one seed)
    that ``runs[start]`` belongs to: their number times the mean wall time of the finished runs
    (None when none has finished)."""
    done = [effective_status(r) == "done" for r in runs]
    walls = [float(wall) for r, finished in zip(runs, done) if finished
             and (wall := read_state(r.workdir).get("wall_time_s"))]
    if not walls:
        return None
    seed = runs[start].seed
    lo, hi = start, start
    while lo > 0 and runs[lo - 1].seed == seed:
        lo -= 1
    while hi < len(runs) and runs[hi].seed == seed:
        hi += 1
    return sum(not finished for finished in done[lo:hi]) * sum(walls) / len(walls)


def run_statuses(runs: Iterable[RunSpec]) -> list[dict[str, Any]]:
    """One row per run: strategy, seed, status, final validation accuracy, wall time."""
    rows = []
    for spec in runs:
        state = read_state(spec.workdir)
        final = final_metrics(spec.workdir)
        rows.append(
            {
                "run": spec.name,
                "strategy": spec.strategy,
                "seed": spec.seed,
                "status": effective_status(spec) if state.get("status") != "submitted" else "submitted",
                "step": final.get("step"),
                "final_accuracy": final.get("accuracy"),
                "wall_time_s": state.get("wall_time_s"),
                "job_id": state.get("job_id"),
            }
        )
    return rows


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    """The summary rows as an aligned text table."""
    headers = ["strategy", "seed", "status", "step", "final_accuracy", "wall_time"]
    table = [headers]
    for r in rows:
        acc = r["final_accuracy"]
        wall = r["wall_time_s"]
        table.append([
            r["strategy"], str(r["seed"]), r["status"], "-" if r["step"] is None else str(r["step"]),
            "-" if acc is None else f"{acc:.3f}",
            "-" if wall is None else f"{wall / 60:.1f} min",
        ])
    return aligned_table(table)
