"""The training loop (DESIGN §5): sample debates -> grade -> shape -> advantages -> filter -> update,
then sync the sampler, validate, checkpoint and log. The array work of a step is
:mod:`jaxdebate.rl.step`; the loop carries one value, the :class:`~jaxdebate.rl.run_state.RunState`
after the last completed step (what a checkpoint holds), and each step returns the next one.

``Trainer(config, workdir).run()`` runs one experiment. A workdir that holds a checkpoint is resumed
from it exactly: the same data order, the same sampling seeds, the same sampler and reference weights.
Ctrl-C / SIGTERM during sampling abandons the step in flight and checkpoints the last completed one;
during the update it lets the step finish first. A second signal stops at once.
Under ``training.sample_ahead`` the next step's debates are played while a step learns
(:mod:`jaxdebate.rl.debate_source`); a stop drops them and a resume plays them again.

Under ``jax.distributed`` (:mod:`jaxdebate.distributed`) every process runs this same loop over a
global mesh: process 0 samples, grades, logs and writes metrics and hands each step's training
samples to the others; every process learns on its shard of the rows and saves collectively.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from tqdm import tqdm

from jaxdebate import distributed
from jaxdebate.checkpointer import START_OVER, CheckpointError, Checkpointer, checkpoint_dir, latest_step
from jaxdebate.config import Config
from jaxdebate.configlib import to_dict
from jaxdebate.data import ItemStream
from jaxdebate.debate import Grader, run_debates
from jaxdebate.errors import ConfigError, JaxDebateError, RunError
from jaxdebate.metrics import MetricWriter
from jaxdebate.model import load, load_tokenizer, make_mesh, shard_params
from jaxdebate.model.mesh import sampling_devices
from jaxdebate.rl.batching import Sample, pack_samples, rows_cap_for, unpack_samples
from jaxdebate.rl import config_history, run_state
from jaxdebate.rl.debate_source import DebateSource
from jaxdebate.rl.grpo import Learner
from jaxdebate.rl.optim import all_finite, nonfinite_update
from jaxdebate.rl.step import Layout, training_samples, update
from jaxdebate.rl.preflight import check_prompts_fit
from jaxdebate.rl.step_metrics import timing_metrics, train_metrics
from jaxdebate.rl.timing import PhaseTimer
from jaxdebate.rl.watch import StepWatch
from jaxdebate.rl import validation_plan
from jaxdebate.sampling.factory import make_sampler
from jaxdebate.workdir_lock import WorkdirLock

UNREADABLE_DIR = "unreadable_checkpoints"  # damaged checkpoint steps are moved here on resume, not deleted
__all__ = ["RunResult", "Trainer", "train"]


class _Stop(BaseException):
    """Raised inside the loop when a stop signal arrives while the step in flight can be abandoned."""


# What process 0 tells the others with each step's samples (multi-process runs).
_GO, _STOP, _ABORT = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One completed step: the run after it, its metrics ({} on processes that do not sample) and
    what the throughput metrics need."""

    run: run_state.RunState
    metrics: dict[str, float]
    seconds: float
    sampled_tokens: float
    learner_tokens: float


@dataclasses.dataclass
class RunResult:
    """What ``Trainer.run`` returns: the last completed step, why it stopped, the last metrics."""

    step: int
    status: str  # "finished" | "interrupted"
    metrics: dict[str, float]
    workdir: Path


class Trainer:
    """One experiment in ``workdir`` (checkpoints/, metrics.jsonl, tensorboard/, config.json)."""

    def __init__(self, config: Config, workdir: str | Path, *, allow_config_change: bool = False) -> None:
        if not isinstance(config, Config):
            raise ConfigError(f"Trainer needs a jaxdebate.config.Config, got {type(config).__name__}")
        self.config = config
        self.workdir = Path(workdir).expanduser().resolve()
        self.allow_config_change = allow_config_change
        self._config_changes: list = []
        self._stop_requested = 0
        self._interruptible = False
        self.timer = PhaseTimer()
        self.run_state: run_state.RunState | None = None  # the run after its last completed step

    # ------------------------------------------------------------------------------------------ setup

    def _setup(self) -> None:
        cfg = self.config
        self.main = distributed.is_main()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not cfg.checkpoint.resume and (newest := latest_step(self.workdir)) is not None:
            # starting over at step 0 here would skip saving every step the old run has on disk and
            # leave its newer checkpoints as the run's latest
            raise RunError(f"{self.workdir} holds checkpoints (newest step {newest}) and checkpoint.resume is "
                           f"false: {START_OVER}")
        n_dev = cfg.launch.training_devices
        distributed.check_training_devices(n_dev)
        self.mesh = make_mesh(n_dev) if n_dev > 1 else None
        local = sampling_devices(jax.local_devices(), n_dev if not distributed.is_multiprocess() else 0,
                                 cfg.launch.sampling_devices)
        self.sampler_mesh = Mesh(np.asarray(local), ("data",)) if len(local) > 1 else None
        self.sampler_device = local[0]
        self.tokenizer = load_tokenizer(cfg.model.source)
        train_items, self.val_items = cfg.data.load()
        self.transfer_items = cfg.data.load_transfer(train_items)
        check_prompts_fit(cfg, self.tokenizer, train_items, self.val_items, self.transfer_items)
        params, self.model_config = load(cfg.model.source, dtype=cfg.model.dtype, dot_dtype=cfg.model.dot_dtype,
                                         remat=cfg.model.remat)
        self.stream = ItemStream(train_items, cfg.training.train_batch_size, cfg.training.seed)
        self.debates = DebateSource(self.stream, self._play if self.main else None)
        self._served_early: tuple[int, object] | None = None  # (version, weights) pushed for a validation
        self.grader = Grader() if self.main else None
        epochs = cfg.loss.ppo_epochs
        self.learner = Learner(
            self.model_config, cfg.loss, cfg.optimizer, cfg.training.total_train_steps * epochs,
            temperature=cfg.sampler.temperature, logprob_chunk=cfg.model.logprob_chunk,
            lora=cfg.model.lora, seed=cfg.training.seed,
        )
        t = cfg.training
        self.layout = Layout(
            max_len=cfg.debate.max_sequence_length,
            rows_cap=rows_cap_for(cfg.samples_per_step, cfg.optimizer.n_gradient_accumulation_steps),
            max_tokens=t.max_tokens_per_microbatch, aggregation=cfg.loss.aggregation,
            max_completion=cfg.sampler.max_new_tokens, pad_id=self.tokenizer.pad_id,
            min_rows=cfg.launch.training_devices, packing=t.packing, ppo_epochs=epochs,
            split_short_rows=t.split_short_rows,
        )
        self.checkpointer = Checkpointer(checkpoint_dir(self.workdir), cfg.checkpoint.n_last_ckpts_to_keep)

        if not (cfg.checkpoint.resume and self._resume(params) is not None):
            if self.mesh is not None:
                params = shard_params(params, self.mesh)
            state = self.learner.init_state(params)
            if self.mesh is not None and distributed.is_multiprocess():
                state = shard_params(state, self.mesh)  # counters and adapters as global arrays
            self.run_state = run_state.RunState(
                step=0, train=state, rng=jax.random.key(t.seed), data=self.stream.state(), sampler_version=0,
                ref_version=0, sampler_source=jax.tree.map(jnp.copy, state.params))
        run = self.run_state
        self.sampler = self.writer = None
        if not self.main:  # process 0 alone samples and writes
            return
        config_history.record(self.workdir, cfg, run.step, self._config_changes)
        for path, before, after in self._config_changes:
            print(f"[jaxdebate] resuming step {run.step} with {path}: {before!r} -> {after!r} "
                  f"(recorded in {config_history.HISTORY_FILE})", file=sys.stderr)
        self.sampler = make_sampler(
            cfg.sampler, self._served(run.sampler_source), self.model_config, self.tokenizer,
            workdir=self.workdir, max_total_len=cfg.debate.max_sequence_length, mesh=self.sampler_mesh,
            seed=t.seed, version=run.sampler_version,
        )
        log = cfg.logging
        self.writer = MetricWriter(
            self.workdir, tensorboard=log.tensorboard,
            wandb_project=log.wandb_project if log.wandb else None, wandb_mode=log.wandb_mode,
            wandb_entity=log.wandb_entity, run_name=log.run_name or self.workdir.name,
            config=to_dict(cfg), truncate_after=run.step,
        )

    # ------------------------------------------------------------------------------ checkpointing

    def _save(self) -> None:
        run = self.run_state
        if run.step == 0 or run.step in self.checkpointer.all_steps():
            return
        if not bool(all_finite(run.train.params)):  # never reached while the learner skips bad updates
            raise JaxDebateError(f"step {run.step}: the parameters are non-finite; no checkpoint written")
        items, metadata = run_state.pack(run, config=to_dict(self.config),
                                         model_config=dataclasses.asdict(self.model_config))
        self.checkpointer.save(run.step, items, metadata)

    def _resume(self, params) -> int | None:
        """Restore the newest readable checkpoint (damaged newer steps are moved to
        ``<workdir>/unreadable_checkpoints/``); the step restored, or None when there is none."""
        return self.checkpointer.restore_newest(lambda step: self._restore(params, step),
                                                self.workdir / UNREADABLE_DIR, move=distributed.is_main())

    def _restore(self, params, step: int) -> None:
        meta = self.checkpointer.metadata(step)
        run_state.check_metadata(meta, str(self.checkpointer.step_dir(step)))
        self._config_changes = config_history.check_resume(
            self.config, meta.get("config", to_dict(self.config)), step, allow=self.allow_config_change)
        config_history.check_model(meta.get("model_config"), dataclasses.asdict(self.model_config), step)
        if self.mesh is not None:
            params = shard_params(params, self.mesh)
        self.learner.set_base(params)
        target = run_state.restore_target(self.learner.abstract_state(params), set(meta.get("__items__", [])),
                                          self.mesh)
        restored, meta = self.checkpointer.restore(step, target=target)
        if self.mesh is None:
            # orbax returns committed arrays; a fresh run's are uncommitted. Match the fresh run, so the
            # resumed process runs the very executables (and numerics) the uninterrupted one runs.
            restored = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), restored)
        run = run_state.unpack(restored, meta)
        if not bool(all_finite(run.train.params)):  # written before divergence was caught: skipped
            raise CheckpointError(f"checkpoint {self.checkpointer.step_dir(step)} holds non-finite parameters")
        self.stream.restore(run.data)
        # the served tree may be the policy's own arrays, which the next update donates
        self.run_state = dataclasses.replace(run, sampler_source=jax.tree.map(jnp.copy, run.sampler_source))

    def _served(self, trainable):
        """The model tree the sampler samples from for a trainable tree (a copy, or base + adapter
        under LoRA). The sampler runs on process 0's own devices: with a learner mesh, it gets a copy
        placed there, not the global arrays."""
        weights = self.learner.weights(trainable, copy=False)
        if self.mesh is not None or self.sampler_device != jax.local_devices()[0]:
            weights = jax.device_put(distributed.host_local(weights), self.sampler_device)
        return weights

    # ---------------------------------------------------------------------------------- signals

    def _on_signal(self, signum, frame) -> None:
        self._stop_requested += 1
        if self._stop_requested > 1:
            raise KeyboardInterrupt  # second signal: stop now, no checkpoint
        if self._interruptible:
            raise _Stop

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, self._on_signal)
        return previous

    # -------------------------------------------------------------------------------------- step

    def _train_step(self, run: run_state.RunState) -> StepResult:
        """Sample and grade debates (process 0), turn them into samples, update, move the reference
        and the sampler's weights when due; the run after the step."""
        cfg, timer = self.config, self.timer
        step_start = time.perf_counter()
        self._interruptible = self.main
        try:
            if self.main and self._stop_requested:
                raise _Stop
            with timer("sampling"):  # every process draws: the same data position and RNG
                drawn = self.debates.take(run.rng)
        except _Stop:
            self._interruptible = False
            self._share(_STOP)
            raise
        except BaseException:
            self._interruptible = False
            self._share(_ABORT)
            raise
        self._interruptible = False
        batch, t = drawn.batch, cfg.training
        sampler_stats = None
        if t.sample_ahead:
            # the sync due after the last step, made now that its debates are in; then the next
            # step's debates play on those weights while this one learns
            early = self._served_early is not None and self._served_early[0] == run.step
            synced = self._sync(run, run.step)
            if run.step + 1 < t.total_train_steps:
                if self.sampler is not None:  # read before the sampler plays ahead: its counters move then
                    sampler_stats = self.sampler.stats()
                    if synced.sampler_version != run.sampler_version and not early:  # log this step's sync
                        sampler_stats = {**sampler_stats, "sync/version": run.step + 1}
                self.debates.start(drawn.rng)
            run = synced

        with timer("learning"):
            signal_ = training_samples(batch, cfg.shaping, cfg.loss) if batch is not None else None
            samples = self._share(_GO, signal_.samples if signal_ is not None else [])
            state, learned, layout = update(self.learner, run.train, samples, self.layout, self.mesh)

        step = run.step + 1
        run = dataclasses.replace(run, step=step, train=state, rng=drawn.rng, data=drawn.data)
        if step % t.hard_update_ref_every_steps == 0:
            run = dataclasses.replace(run, train=self.learner.hard_update_reference(run.train), ref_version=step)
        if not self.debates.ahead:  # else at the next step's start, after the debates in flight
            run = self._sync(run, step)

        metrics = {} if batch is None else train_metrics(
            batch, reward=signal_.reward, filters=signal_.filters, advantages=signal_.advantages,
            learner=learned, layout=layout, updated=bool(samples) and nonfinite_update(learned) is None,
            step=step, sampler_version=run.sampler_version, ref_version=run.ref_version,
            sampler_stats=self.sampler.stats() if sampler_stats is None else sampler_stats,
        )
        return StepResult(run, metrics, seconds=time.perf_counter() - step_start,
                          sampled_tokens=float(batch.stats.get("completion_tokens", 0)) if batch is not None else 0.0,
                          learner_tokens=float(layout.get("sequence_tokens", 0)))

    def _play(self, items, seed: int):
        """Process 0's debates of ``items`` on the sampler, graded (a step's, or the next one's ahead)."""
        cfg = self.config
        return run_debates(self.sampler, self.tokenizer, items, config=cfg.debate,
                           n_rollouts=cfg.training.generations_per_prompt, sampling=cfg.sampler.sampling_params(),
                           grader=self.grader, env_name_remap=cfg.data.env_name_remap, seed=seed)

    def _sync(self, run: run_state.RunState, version: int) -> run_state.RunState:
        """The run with the sampler serving the policy after step ``version``, when that step is an
        export step newer than what it serves (``run.train.params`` must be that policy). A copy is
        served: the next update donates the policy's arrays."""
        if version == 0 or version % self.config.training.export_every_steps or run.sampler_version >= version:
            return run
        early, self._served_early = self._served_early, None
        if early is not None and early[0] == version:  # pushed already, for a validation
            source = early[1]
        else:
            source = self._push(run.train.params, version)
        return dataclasses.replace(run, sampler_source=source, sampler_version=version)

    def _push(self, params, version: int):
        """A copy of ``params`` (the next update donates the policy's arrays), served by the sampler
        (process 0) as ``version``; the copy."""
        with self.timer("sync"):
            source = jax.tree.map(jnp.copy, params)
            if self.sampler is not None:
                self.sampler.update_weights(self._served(source), version)
        return source

    def _serve_for_validation(self) -> None:
        """Under ``training.sample_ahead`` the sync of an export step waits for the next step; a
        validation after it gets the weights now, once the debates in flight are done, as an
        on-policy run's would (``run_state`` keeps the weights those debates were played on, which
        a resume plays them on again)."""
        run, every = self.run_state, self.config.training.export_every_steps
        if not self.debates.ahead or run.step % every or run.sampler_version >= run.step:
            return
        self.debates.settle()
        if self._served_early is None or self._served_early[0] != run.step:
            self._served_early = (run.step, self._push(run.train.params, run.step))

    def _share(self, signal_: int, samples: list[Sample] | None = None) -> list[Sample]:
        """Process 0's samples of this step on every process (a multi-process run; one process: as
        given). The others learn from what it sends, stop with it (``_STOP``: checkpoint and exit) or
        fail with it (``_ABORT``: its error is in its log)."""
        if not distributed.is_multiprocess():
            return samples or []
        arrays = None
        if self.main:
            arrays = {"signal": np.asarray(signal_)}
            if samples:
                arrays.update(pack_samples(samples))
        got = distributed.broadcast_arrays(arrays)
        received = int(got["signal"])
        if received == _STOP:
            raise _Stop
        if received == _ABORT:
            raise JaxDebateError("process 0 failed while sampling this step (its log has the error)")
        return unpack_samples(got) if "advantage" in got else []

    def _validate(self) -> dict[str, float]:
        self._serve_for_validation()  # every process: the copy of a global array is made by all
        if not self.main:
            return {}
        self.debates.settle()  # the sampler is the validation's alone
        run = self.run_state
        with self.timer("validation"):
            metrics = validation_plan.run(
                run.step, self.config, self.sampler, self.tokenizer, self.grader, self.val_items,
                self.transfer_items, sampling=self.config.sampler.sampling_params(evaluation=True),
                workdir=self.workdir)
        return {**metrics, "val/weight_version": float(self.sampler.weight_version)} if metrics else {}

    # --------------------------------------------------------------------------------------- run

    def run(self) -> RunResult:
        """Train until ``training.total_train_steps`` (or a stop signal); returns the final state."""
        cfg = self.config
        t = cfg.training
        self.timer.open()
        previous_handlers = None
        status = "finished"
        last: dict[str, float] = {}
        bar = None
        lock = WorkdirLock(self.workdir)
        try:
            if distributed.is_main():  # the other processes of a multi-process run share process 0's
                lock.acquire()
            self._setup()
            previous_handlers = self._install_signals()
            bar = tqdm(total=t.total_train_steps, initial=self.run_state.step,
                       disable=not (cfg.logging.progress_bar and self.main),
                       desc=self.workdir.name, unit="step", dynamic_ncols=True)
            if t.validate_at_start and self.run_state.step == 0 and self.writer is not None:
                self.writer.write(0, self._validate())
            watch = StepWatch(t.nonfinite_patience, t.idle_warning_steps)
            while self.run_state.step < t.total_train_steps:
                try:
                    result = self._train_step(self.run_state)
                except _Stop:
                    status = "interrupted"
                    break
                self.run_state, metrics = result.run, dict(result.metrics)
                step = result.run.step
                for line in watch.observe(step, metrics, self.checkpointer.latest_step()):
                    print(f"[jaxdebate] {line}", file=sys.stderr)
                # a failed validation is reported after the step is logged and checkpointed, so a
                # rerun resumes after this step instead of losing it
                val_error = None
                if t.validation_every_steps and (step % t.validation_every_steps == 0 or step == t.total_train_steps):
                    try:
                        metrics.update(self._validate())
                    except Exception as e:  # noqa: BLE001 - re-raised below, after the checkpoint
                        val_error = e
                seconds = self.timer.take()  # a checkpoint's time is reported with the next step
                metrics.update(timing_metrics(seconds, step_seconds=result.seconds, sampled_tokens=result.sampled_tokens,
                                              learner_tokens=result.learner_tokens))
                # metrics first: a run killed while checkpointing has logged every step it resumes after
                if self.writer is not None and (step % t.log_every_steps == 0 or step == t.total_train_steps):
                    self.writer.write(step, metrics)
                if watch.stop is not None:
                    raise watch.stop
                due = (t.checkpoint_every_steps and step % t.checkpoint_every_steps == 0) or step == t.total_train_steps
                if due or (val_error is not None and not distributed.is_multiprocess()):
                    with self.timer("checkpoint"):
                        self._save()
                if val_error is not None:
                    raise JaxDebateError(f"validation at step {step} failed (step {step} is logged and "
                                         f"checkpointed; a rerun resumes after it): {val_error}") from val_error
                last = metrics
                bar.update(1)
                bar.set_postfix(reward=f"{metrics.get('train/reward/raw/mean', 0):.3f}",
                                acc=f"{metrics.get('train/accuracy', 0):.3f}",
                                tok_s=f"{metrics['throughput/tokens_per_s']:.0f}")
                if distributed.any_process(self._stop_requested > 0):  # every process stops together
                    status = "interrupted"
                    break
            if status == "interrupted" and cfg.checkpoint.save_on_interrupt:
                self._save()
        finally:
            if bar is not None:
                bar.close()
            if previous_handlers:
                for s, h in previous_handlers.items():
                    signal.signal(s, h)
            self.timer.close()
            try:
                self._close()
            finally:
                lock.release()
        step = self.run_state.step if self.run_state is not None else 0
        return RunResult(step=step, status=status, metrics=last, workdir=self.workdir)

    def _close(self) -> None:
        # the sampler before the debates played ahead: a job still in flight (a stop, an error) then
        # fails at its next request instead of finishing its batch; the grader after them
        for name in ("writer", "sampler", "debates", "grader", "checkpointer"):
            obj = getattr(self, name, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception as e:  # noqa: BLE001 - closing must not hide the run's own error
                    print(f"[jaxdebate] closing {name} failed: {e}", file=sys.stderr)


def train(config: Config, workdir: str | Path, *, allow_config_change: bool = False) -> RunResult:
    """Run (or resume) one experiment in ``workdir`` (see :mod:`jaxdebate.rl.config_history` for
    what a resume may change)."""
    return Trainer(config, workdir, allow_config_change=allow_config_change).run()
