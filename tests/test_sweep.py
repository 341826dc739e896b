"""The five-strategy sweep on the smoke config: local executor with a kill and resume, submitit's local
executor, the SLURM parameters, the analysis plots and the notebook executed headless."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxdebate import analysis, sweep_plots, sweep_runs
from jaxdebate.checkpointer import latest_step
from jaxdebate.configlib import load_config
from jaxdebate.errors import ConfigError
from jaxdebate.sweep import choose_executor, make_executor, prune_checkpoints, read_state, run_sweep, slurm_parameters, task_rank
from jaxdebate.sweep_plan import block_order, plan_runs

REPO = Path(__file__).resolve().parent.parent
SMOKE = str(REPO / "configs" / "smoke.py")
# Two steps, checkpoint every step (so a killed run has something to resume from), validation at the end;
# one prompt a step (still 4 debates of 3 agents) and short turns: the sweep's bookkeeping is under test here.
FAST = [
    "training.total_train_steps=2",
    "training.checkpoint_every_steps=1",
    "training.validation_every_steps=2",
    "training.train_batch_size=1",
    "sampler.max_new_tokens=8",
    "logging.progress_bar=false",
]
STRATEGIES = ["identity", "difference_rewards", "potential_based", "coma", "reward_mixing"]
RUN_ORDER = [STRATEGIES[i] for i in block_order(0, len(STRATEGIES))]  # seed 0's block, as the sweep runs it


def _sweep_cmd(sweep_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, str(REPO / "launch" / "sweep.py"), "--sweep-dir", str(sweep_dir),
            "--base", SMOKE, "--seeds", "0", "--quiet", *[a for o in FAST for a in ("--set", o)], *extra]


def _env(cache: Path) -> dict[str, str]:
    """The session's shared XLA cache when conftest set one (other smoke runs filled it), else ``cache``;
    every program is cached (the sweep's six launches compile the same ones), not only slow compiles."""
    return dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.environ.get("JAX_COMPILATION_CACHE_DIR", str(cache)),
                JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 5-strategy smoke sweep, killed (SIGKILL to the whole process group) while its third run is
    mid-way, then re-launched keeping the last checkpoint of each finished run. Returns (sweep_dir, output of the second launch)."""
    root = tmp_path_factory.mktemp("sweep")
    sweep_dir, cache = root / "sweep", root / "jax_cache"
    proc = subprocess.Popen(_sweep_cmd(sweep_dir), cwd=REPO, env=_env(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    third = sweep_dir / f"{RUN_ORDER[2]}-seed0"
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        if latest_step(third) == 1 and read_state(third).get("status") == "running":
            break
        time.sleep(0.5)
    assert proc.poll() is None, f"the sweep ended before it could be killed:\n{proc.stdout.read()}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_state(third)["status"] == "running"  # what a SIGKILL leaves behind

    second = subprocess.run(_sweep_cmd(sweep_dir, "--export", str(root / "results"), "--endpoint",
                                       "final_debate_accuracy", "--keep-checkpoints", "last"), cwd=REPO, env=_env(cache), capture_output=True,
                            text=True, timeout=900)
    assert second.returncode == 0, second.stdout + second.stderr
    return sweep_dir, second.stdout


@pytest.mark.slow
def test_relaunch_skips_finished_and_resumes_killed_run(sweep):
    sweep_dir, out = sweep
    assert f"{RUN_ORDER[0]}-seed0: finished, skipped" in out
    assert f"{RUN_ORDER[1]}-seed0: finished, skipped" in out
    assert f"{RUN_ORDER[2]}-seed0: resuming" in out
    third = sweep_dir / f"{RUN_ORDER[2]}-seed0"
    assert "resuming" in (third / "launch.log").read_text() and "from step 1" in (third / "launch.log").read_text()
    state = read_state(third)
    assert state["status"] == "done" and state["attempts"] == 2
    # every attempt records the code and the machine; the cost is the child's CPU time, both attempts
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert [a["attempt"] for a in state["history"]] == [1, 2]
    assert all(a["commit"] == head and a["host"] == os.uname().nodename for a in state["history"])
    assert state["commit"] == head and isinstance(state["dirty"], bool)
    assert state["cpu_flags"] and ("avx512" in state["cpu_flags"] or "AVX2" in state["cpu_flags"])
    first = read_state(sweep_dir / f"{RUN_ORDER[0]}-seed0")
    assert 0 < first["cpu_time_s"] and len(first["history"]) == 1
    assert 0 < state["cpu_time_s"]
    steps = [r["step"] for r in sweep_runs.load_run(third).records if "train/accuracy" in r]
    assert steps == [1, 2], steps  # the killed step was redone once, nothing duplicated
    for name in STRATEGIES:
        assert read_state(sweep_dir / f"{name}-seed0")["status"] == "done"
        assert latest_step(sweep_dir / f"{name}-seed0") == 2


@pytest.mark.slow
def test_a_relaunch_asking_for_another_design_is_refused_before_any_run(sweep):
    """Finished runs are skipped only when they ran what the relaunch asks for: a longer run (or any
    field a step computes with) would otherwise mix two designs in one sweep. Logging may differ."""
    sweep_dir, _ = sweep
    before = {name: read_state(sweep_dir / f"{name}-seed0") for name in STRATEGIES}
    other = subprocess.run(_sweep_cmd(sweep_dir, "--set", "training.total_train_steps=3", "--set", "loss.beta=0.5"),
                           cwd=REPO, env=_env(sweep_dir.parent / "jax_cache"), capture_output=True, text=True, timeout=300)
    assert other.returncode == 2, other.stdout + other.stderr
    assert "sweep: invalid configuration: 5 finished run(s) of this sweep ran another config" in other.stderr
    beta = load_config(SMOKE).loss.beta
    assert f"{RUN_ORDER[0]}-seed0 finished with loss.beta={beta!r} (now 0.5), training.total_train_steps=2 (now 3)" in other.stderr
    assert {name: read_state(sweep_dir / f"{name}-seed0") for name in STRATEGIES} == before
    same = subprocess.run(_sweep_cmd(sweep_dir, "--set", "logging.progress_bar=true"), cwd=REPO,
                          env=_env(sweep_dir.parent / "jax_cache"), capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and same.stdout.count("finished, skipped") == 5, same.stdout + same.stderr


@pytest.mark.slow
def test_finished_runs_keep_only_what_was_asked_of_their_checkpoints(sweep, tmp_path):
    """``--keep-checkpoints last`` left each finished run its newest orbax step (the runs wrote one
    per step), skipped runs included; ``none`` removes them all and nothing else."""
    sweep_dir, out = sweep
    for name in STRATEGIES:
        steps = sorted(p.name for p in (sweep_dir / f"{name}-seed0" / "checkpoints").iterdir() if p.name.isdigit())
        assert steps == ["2"], (name, steps)
    assert out.count("kept last of its checkpoints") == len(STRATEGIES)
    run = tmp_path / "run"
    shutil.copytree(sweep_dir / f"{RUN_ORDER[0]}-seed0", run)
    kept = sorted(str(p.relative_to(run)) for p in run.rglob("*") if "checkpoints" not in p.parts)
    assert prune_checkpoints(run, "none") > 0
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.isdigit()]
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if "checkpoints" not in p.parts) == kept
    assert prune_checkpoints(run, "none") == 0
    with pytest.raises(ConfigError, match="keep_checkpoints"):
        prune_checkpoints(run, "first")


@pytest.mark.slow
def test_export_after_each_run_holds_the_results_so_far(sweep):
    """``--export DIR``: after every run of the second launch the results so far are written (what a
    results/ directory commits run by run)."""
    sweep_dir, out = sweep
    results = sweep_dir.parent / "results"
    assert out.count(f"results so far in {results}") == 3  # the three runs the second launch ran
    summary = json.loads((results / "summary.json").read_text())
    assert summary["endpoint"] == "final_debate_accuracy"
    assert sorted(r["strategy"] for r in summary["runs"]) == sorted(STRATEGIES)
    for name in STRATEGIES:
        run = results / "runs" / f"{name}-seed0"
        assert (run / "metrics.jsonl").is_file() and json.loads((run / "run.json").read_text())["status"] == "done"


@pytest.mark.slow
def test_the_arms_of_a_seed_block_sample_the_same_first_step(sweep):
    """Common random numbers: a seed fixes the data order and the sampling draws, so every arm's first
    step (same initial weights) samples the same debates; only the credit given to them differs."""
    sweep_dir, _ = sweep
    first = {name: next(r for r in sweep_runs.load_run(sweep_dir / f"{name}-seed0").records if r.get("step") == 1
                        and "train/samples_fingerprint" in r) for name in STRATEGIES}
    assert len({r["train/samples_fingerprint"] for r in first.values()}) == 1
    raw = [k for k in first["identity"] if k.startswith("train/reward/raw/") or k == "train/accuracy"]
    assert raw and all(first[name][k] == first["identity"][k] for name in STRATEGIES for k in raw)
    shaped = {name: tuple(r[k] for k in sorted(r) if k.startswith("train/reward/shaped/")) for name, r in first.items()}
    assert len(set(shaped.values())) > 1  # the arms do differ in what they make of those samples


@pytest.mark.slow
def test_summary_table_and_plots(sweep):
    sweep_dir, out = sweep
    for name in STRATEGIES:
        assert name in out
    assert "final_accuracy" in out and out.count(" done ") >= 5
    rows = json.loads((sweep_dir / "summary.json").read_text())
    assert [r["strategy"] for r in rows] == RUN_ORDER
    assert all(r["status"] == "done" and r["step"] == 2 and r["final_accuracy"] is not None for r in rows)

    runs = sweep_runs.load_sweep(sweep_dir)
    table = analysis.final_accuracy_table(runs)
    assert [r["strategy"] for r in table] == STRATEGIES
    assert all(r["accuracy/debate/n"] == 1 for r in table)
    curves = sweep_runs.aggregate(runs, sweep_plots.REWARD_SHAPED)
    assert set(curves) == set(STRATEGIES) and all(list(c["steps"]) == [1, 2] for c in curves.values())
    paths = sweep_plots.write_plots(runs, sweep_dir / "plots", analysis.summarise(runs))
    assert [p.name for p in paths] == ["rewards.png", "validation_accuracy.png", "training_signal.png", "comparison.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000

    # the committable results: summary.json (runs + per-strategy table), table.md, metrics, plots
    results = sweep_dir.parent / "results"
    assert analysis.main([str(sweep_dir), "--out", str(sweep_dir / "plots"), "--results", str(results)]) == 0
    summary = json.loads((results / "summary.json").read_text())
    assert [r["strategy"] for r in summary["runs"]] == STRATEGIES
    for r in summary["runs"]:
        assert r["seed"] == 0 and r["status"] == "done" and r["steps"] == 2 and r["final_step"] == 2
        assert 0 <= r["final_accuracy"] <= 1 and r["initial_accuracy"] is None  # no validation at step 0 here
        assert (results / "runs" / f"{r['strategy']}-seed0" / "metrics.jsonl").is_file()
    assert [t["strategy"] for t in summary["table"]] == STRATEGIES and all(t["seeds"] == 1 for t in summary["table"])
    strategy_rows = (results / "table.md").read_text().split("\n\n")[0]
    assert strategy_rows.count("\n| ") == 5  # a row per strategy below header and rule
    assert all(r["step_time_s"] > 0 and r["no_update_steps"] == 0 for r in summary["runs"])  # smoke: filters off and all(t["train_time_min"] > 0 for t in summary["table"])
    comparison = summary["comparison"]  # one seed per strategy: differences but no intervals or test
    assert comparison["baseline"] == "identity" and comparison["anova_permutation_p"] is None
    assert [c["strategy"] for c in comparison["vs_baseline"]] == STRATEGIES[1:]
    assert all(c["seeds"] == [0] and c["ci95"] is None and c["p"] is None and c["p_holm"] is None
               for c in comparison["vs_baseline"])
    assert comparison["blocked"] is None and comparison["power"] is None  # one seed: no seed-level test
    assert all(g["seeds"] == [] and g["mean_gain"] is None for g in comparison["learning"])  # no step-0 validation
    assert "permutation one-way ANOVA" in (results / "table.md").read_text()
    assert sorted(p.name for p in (results / "plots").iterdir()) == sorted(p.name for p in paths)


@pytest.mark.slow
def test_notebook_executes_headless(sweep, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    sweep_dir, _ = sweep
    nb = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    os.environ["JAXDEBATE_SWEEP_DIR"] = str(sweep_dir)
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        del os.environ["JAXDEBATE_SWEEP_DIR"]
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 4  # rewards, validation, training signal, seed-level comparison
    text = "".join(o.get("text", "") for o in outputs)
    assert "=== item" in text and "debate answer" in text  # a transcript from a restored checkpoint


@pytest.mark.slow
def test_submitit_local_executor_runs_a_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    runs = plan_runs(sweep_dir, [REPO / "configs" / "coma.py"], [3], base=SMOKE,
                     overrides=[*FAST, "training.total_train_steps=1", "training.validation_every_steps=1"])
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
    rows = run_sweep(runs, executor="submitit_local", sweep_dir=sweep_dir, echo=False)
    assert rows[0]["status"] == "done" and rows[0]["step"] == 1, rows
    state = read_state(sweep_dir / "coma-seed3")
    assert state["job_id"] and state["executor"] == "submitit_local"
    assert list((sweep_dir / "submitit").glob(f"{state['job_id']}_*result.pkl"))
    config = json.loads((sweep_dir / "coma-seed3" / "config.json").read_text())
    assert config["shaping"] == {"strategy": "coma_advantage", "params": {"n_rollouts_per_prompt": 4},
                                  "credit": "turn", "discount": 1.0}
    assert config["training"]["seed"] == 3 and config["model"]["source"] == "tiny"


def test_slurm_parameters_from_the_launch_section(tmp_path, monkeypatch):
    runs = plan_runs(tmp_path / "sweep", None, [42, 43], order="configs",
                     launch_overrides=["partition=gpu_8", "gpus_per_node=8", "time_limit_minutes=90"])
    assert [r.name for r in runs] == [f"{s}-seed{k}" for s in STRATEGIES for k in (42, 43)]
    spec = runs[0]
    params = slurm_parameters(spec.launch, spec.name)
    assert params["slurm_partition"] == "gpu_8" and params["gpus_per_node"] == 8
    assert params["timeout_min"] == 90 and params["slurm_qos"] == "dev-low"  # the priority class
    # submitit refuses to build a SLURM executor without `srun` on PATH; SLURM itself is absent here,
    # so give it an `srun` that is never run and check the executor's parameters and sbatch script.
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "srun").write_text("#!/bin/sh\nexit 1\n")
    (shim / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    executor = make_executor("slurm", tmp_path / "submitit", spec)
    inner = executor._executor.parameters
    assert inner["partition"] == "gpu_8" and inner["gpus_per_node"] == 8 and inner["qos"] == "dev-low"
    assert inner["time"] == 90 and inner["job_name"] == spec.name and inner["comment"] == "priority=dev-low"
    sbatch = executor._executor._make_submission_file_text("python -c 1", "uid")
    for line in ("#SBATCH --partition=gpu_8", "#SBATCH --gpus-per-node=8", "#SBATCH --qos=dev-low",
                 "#SBATCH --time=90", f"#SBATCH --job-name={spec.name}"):
        assert line in sbatch, sbatch


def test_distributed_slurm_job_spans_nodes_with_one_pinned_task_per_gpu_group(tmp_path, monkeypatch):
    """Issue 16: a run on 2 nodes x 4 tasks, 8 GPUs per node: 8 training processes of 2 GPUs each,
    started by srun (jax.distributed reads the coordinator from SLURM)."""
    runs = plan_runs(tmp_path / "sweep", None, [42], launch_overrides=[
        "executor=slurm", "nodes=2", "tasks_per_node=4", "gpus_per_node=8", "training_devices=16"])
    params = slurm_parameters(runs[0].launch, runs[0].name)
    assert params["nodes"] == 2 and params["tasks_per_node"] == 4 and params["slurm_gpus_per_task"] == 2
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "srun").write_text("#!/bin/sh\nexit 1\n")
    (shim / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    sbatch = make_executor("slurm", tmp_path / "submitit", runs[0])._executor._make_submission_file_text(
        "python -c 1", "uid")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-task=2",
                 "#SBATCH --gpus-per-node=8"):
        assert line in sbatch, sbatch
    assert "srun" in sbatch
    # the config's launch.executor is how the sweep submits unless --executor says otherwise
    local = plan_runs(tmp_path / "local", None, [42])
    assert choose_executor(runs) == "slurm" and choose_executor(local) == "local"
    assert choose_executor(runs, "local") == "local"
    with pytest.raises(ConfigError, match=r"launch.executor values differ: local \(.*-seed42, ...\), slurm"):
        choose_executor([*local, *runs])
    with pytest.raises(ConfigError, match="unknown executor 'pbs'"):
        choose_executor(runs, "pbs")
    with pytest.raises(ConfigError, match="launch.tasks_per_node must divide launch.gpus_per_node=8"):
        plan_runs(tmp_path / "bad", None, [42], launch_overrides=["gpus_per_node=8", "tasks_per_node=3"])
    assert task_rank({"SLURM_NTASKS": "8", "SLURM_PROCID": "5"}) == 5
    assert task_rank({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) == 0 and task_rank({}) == 0


def test_invalid_sweep_fails_before_running(tmp_path):
    with pytest.raises(ConfigError, match="training.seedz"):
        plan_runs(tmp_path, None, [1], overrides=["training.seedz=3"])
    with pytest.raises(ConfigError, match="distinct"):
        plan_runs(tmp_path, None, [1, 1])
    out = subprocess.run([sys.executable, str(REPO / "launch" / "sweep.py"), "--sweep-dir", str(tmp_path),
                          "--launch", "gpus_per_node=-1"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and "launch.gpus_per_node" in out.stderr
    assert not list(tmp_path.iterdir())


def test_a_family_directory_stands_for_its_five_strategies(tmp_path):
    """``--configs configs/arithmetic`` plans the five strategy files, never the family's base.py."""
    runs = plan_runs(tmp_path, [REPO / "configs" / "arithmetic"], [42, 43], order="configs")
    assert [r.name for r in runs[::2]] == [f"{s}-seed42" for s in
                                           ("identity", "difference_rewards", "potential_based", "coma", "reward_mixing")]
    assert all(Path(r.config_path).parent.name == "arithmetic" for r in runs)
    with pytest.raises(ConfigError, match="lacks the strategy config.s. identity.py, difference_rewards.py"):
        plan_runs(tmp_path, [tmp_path], [42])
    # a family missing one arm says which, instead of sweeping four arms
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("identity", "difference_rewards", "potential_based", "reward_mixing"):
        (partial / f"{name}.py").write_text((REPO / "configs" / "arithmetic" / f"{name}.py").read_text())
    with pytest.raises(ConfigError, match=r"lacks the strategy config\(s\) coma\.py \("):
        plan_runs(tmp_path, [partial], [42])


def test_blocked_order_runs_whole_seed_blocks_each_in_its_own_seeded_order(tmp_path):
    """The pre-registered sweep's order (issue 27 item 3): one seed block after another, each running
    all five arms in a permutation drawn from its seed, the same at every launch."""
    seeds = [42, 43, 44, 45]
    runs = plan_runs(tmp_path, [REPO / "configs" / "arithmetic"], seeds)
    blocks = [runs[i:i + 5] for i in range(0, len(runs), 5)]
    assert [{r.seed for r in b} for b in blocks] == [{s} for s in seeds]
    assert all(sorted(r.strategy for r in b) == sorted(STRATEGIES) for b in blocks)
    orders = [[r.strategy for r in b] for b in blocks]
    assert orders == [[STRATEGIES[i] for i in block_order(s, 5)] for s in seeds]
    assert len({tuple(o) for o in orders}) > 1  # not one fixed order
    assert [r.name for r in plan_runs(tmp_path, [REPO / "configs" / "arithmetic"], seeds)] == [r.name for r in runs]
    with pytest.raises(ConfigError, match="unknown sweep order 'random'"):
        plan_runs(tmp_path, None, [1], order="random")


def test_deadline_begins_no_block_that_would_not_end_in_time(tmp_path, capsys):
    """``--deadline``: a seed block is begun only if its unfinished runs, at the finished runs' mean
    wall time, end before the deadline (a session with a time limit stops between blocks)."""
    from jaxdebate.sweep import block_seconds, parse_deadline, write_state

    runs = plan_runs(tmp_path, [REPO / "configs" / "arithmetic"], [42, 43])
    for spec in runs[:5]:  # seed 42's block done, 10 and 20 minutes a run
        write_state(spec.workdir, {"status": "done", "wall_time_s": 600.0 if spec.strategy != "coma" else 1200.0})
    assert block_seconds(runs, 0) == 0 and block_seconds(runs, 5) == pytest.approx(5 * 720.0)
    write_state(runs[6].workdir, {"status": "done", "wall_time_s": 720.0})  # one of seed 43's runs too
    assert block_seconds(runs, 5) == pytest.approx(4 * 720.0) == block_seconds(runs, 9)
    rows = run_sweep(runs, sweep_dir=tmp_path, deadline=time.time() + 45 * 60)  # 48 min needed
    out = capsys.readouterr().out
    assert f"stopping before {runs[5].name}: the rest of seed 43's block needs ~48 min, 45 min left" in out
    assert [r["status"] for r in rows] == ["done"] * 5 + ["pending", "done", "pending", "pending", "pending"]
    assert block_seconds(plan_runs(tmp_path / "fresh", None, [1]), 0) is None  # nothing finished: no estimate
    assert parse_deadline("+90") == pytest.approx(time.time() + 5400, abs=5)
    assert parse_deadline("2026-11-26T01:00:00+00:00") == 1795654800.0
    with pytest.raises(ConfigError, match="--deadline must be"):
        parse_deadline("tonight")
