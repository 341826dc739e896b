"""The pipeline's stages over one work directory, each restartable on its own.

==========================  ==========================================================================
``<workdir>/`` file         written by
==========================  ==========================================================================
``config.json``             every stage (the resolved config of the last stage run)
``rollouts.jsonl``          ``collect`` — one record per question, appended (resumable); elsewhere when
                            ``collect.rollouts`` names a shared file
``pairs.jsonl``             ``pairs`` — preference pairs (each with its ``split``); ``pairs_summary.json``
                            their counts; ``heldout_questions.jsonl`` the held-out questions
``train/``                  ``train`` — ``checkpoints/`` (orbax, one per epoch), ``metrics.jsonl``,
                            TensorBoard events, ``summary.json``; with held-out questions
                            ``epochs.jsonl`` (per-epoch validation) and ``heldout/<run>/epoch_K.jsonl``
``adapter/``                ``train`` — the LoRA adapter in PEFT format
``eval/``                   ``eval`` — ``base.jsonl``, ``dpo.jsonl`` (resumable), ``comparison.jsonl``
                            (one record per question, both models side by side), ``summary.json``
``stages/``                 every stage — ``<stage>.json``: its summary, seconds, commit and machine
                            (the decoder is recorded with the answers: rollouts records, ``*.setting.json``)
==========================  ==========================================================================
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from jaxdebate import jsonl
from jaxdebate.coherence.config import CoherenceConfig
from jaxdebate.configlib import to_dict
from jaxdebate.errors import ConfigError, DataError
from jaxdebate.provenance import provenance

STAGES = ("collect", "pairs", "train", "eval")


@dataclasses.dataclass
class Context:
    """What the stages share within one process: the config, the workdir, and the lazily loaded
    model, tokenizer, sampler and grader (loaded once when ``all`` runs every stage)."""

    config: CoherenceConfig
    workdir: Path
    progress: bool = True
    _model: tuple[Any, Any] | None = None
    _tokenizer: Any = None
    _sampler: Any = None
    _grader: Any = None

    @property
    def model(self) -> tuple[Any, Any]:
        if self._model is None:
            from jaxdebate.model import load

            m = self.config.model
            self._model = load(m.source, dtype=m.dtype, remat=m.remat)
        return self._model

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from jaxdebate.model import load_tokenizer

            self._tokenizer = load_tokenizer(self.config.model.source)
        return self._tokenizer

    @property
    def sampler(self) -> Any:
        """The ``sampler.backend`` serving the base weights (version 0). Every request carries its own
        seed, so the backend's default seed does not matter."""
        if self._sampler is None:
            params, model_config = self.model
            from jaxdebate.sampling.factory import make_sampler

            self._sampler = make_sampler(self.config.sampler, params, model_config, self.tokenizer,
                                         workdir=self.workdir)
        return self._sampler

    @functools.cached_property
    def decoder(self) -> str:
        """The sampler's backend, precision and machine (``sampling.factory.decoder``): recorded with
        the answers it makes (rollouts records, evaluation settings), so answers of two decoders are
        never reused as each other's and a mix is reported."""
        from jaxdebate.sampling.factory import decoder

        return decoder(self.config.sampler, self.config.model.dtype)

    @property
    def grader(self) -> Any:
        if self._grader is None:
            from jaxdebate.debate.grading import Grader

            self._grader = Grader()
        return self._grader

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._grader is not None:
            self._grader.close()
            self._grader = None


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def _say(ctx: Context, text: str) -> None:
    """A stage's one-line summary (printed with or without progress bars)."""
    print(text, flush=True)


def _stage_input(ctx: Context, name: str, stage: str) -> Path:
    """``workdir/name``, which the earlier ``stage`` writes; DataError saying so when it is absent."""
    path = ctx.workdir / name
    if not path.is_file():
        raise DataError(f"{path} does not exist: run the {stage!r} stage first")
    return path


def rollouts_path(config: CoherenceConfig) -> Path:
    """``collect.rollouts`` when set (shared by variants), else ``WORKDIR/rollouts.jsonl``."""
    shared = config.collect.rollouts
    return Path(shared).expanduser() if shared else Path(config.workdir) / "rollouts.jsonl"


def collect_setting(cfg: CoherenceConfig) -> dict[str, Any]:
    """What a rollouts file's records are samples of (``n_questions`` aside: a collection may grow;
    the decoder aside: each record names its own)."""
    return {"model": cfg.model.source, "train": cfg.data.train, "arms": to_dict(cfg.collect)["arms"],
            "canonical_twins": cfg.collect.canonical_twins, "format": dataclasses.asdict(cfg.answer_format),
            "scores": to_dict(cfg.scores), "top_p": cfg.sampler.top_p, "max_tokens": cfg.sampler.max_new_tokens}


ROLLOUTS_REMEDY = "collect into another collect.rollouts (or workdir), or use the config it was collected with"


def collect(ctx: Context) -> dict[str, Any]:
    """Stage 1: every arm's trajectory for the first ``data.n_questions`` training questions (a
    rollouts file made with another setting is refused by :func:`run` first)."""
    from jaxdebate.coherence.collect import collect as run
    from jaxdebate.data import load_items

    cfg = ctx.config
    items = load_items(cfg.data.train, limit=cfg.data.n_questions)
    path = rollouts_path(cfg)  # held to its setting by run() before any stage
    started = time.perf_counter()
    stats = run(
        items, ctx.sampler, ctx.tokenizer, ctx.grader, path, cfg.collect, cfg.scores,
        top_p=cfg.sampler.top_p, max_tokens=cfg.sampler.max_new_tokens, fmt=cfg.answer_format,
        progress=ctx.progress, decoder=ctx.decoder,
    )
    stats["seconds"] = time.perf_counter() - started
    _say(ctx, f"collect: {stats['collected']} new questions ({stats['skipped']} already done), "
              f"{stats['completions']} completions, {stats['tokens']} tokens in {stats['seconds']:.1f} s")
    return stats


def pairs(ctx: Context) -> dict[str, Any]:
    """Stage 2: preference pairs (with their split) from the rollouts, and the held-out questions."""
    from jaxdebate.coherence.pairs import build_pairs, heldout_questions, pairs_summary
    from jaxdebate.data import load_items

    path = rollouts_path(ctx.config)
    if not path.is_file():
        raise DataError(f"{path} does not exist: run the 'collect' stage first")
    jsonl.repair_tail(path)
    # only this config's questions: a file collected for more of them (or grown since) keeps the rest
    wanted = {it.id for it in load_items(ctx.config.data.train, limit=ctx.config.data.n_questions)}
    every = jsonl.read_records(path)
    records = [r for r in every if r["id"] in wanted]
    if len(records) < len(every):
        _say(ctx, f"pairs: {len(every) - len(records)} of {len(every)} records in {path} are of questions beyond "
                  f"data.n_questions={ctx.config.data.n_questions}: not used")
    rules, weight = ctx.config.pairs, ctx.config.scores.conciseness_weight
    built = build_pairs(records, rules, conciseness_weight=weight)
    jsonl.write_records(ctx.workdir / "pairs.jsonl", built)
    jsonl.write_records(ctx.workdir / "heldout_questions.jsonl", heldout_questions(records, rules))
    summary = pairs_summary(records, built, rules, conciseness_weight=weight)
    # which rollouts the pairs came from (variants compared with each other must share them), and which
    # decoders sampled them (questions per decoder; "unrecorded" for records older than the field)
    summary["rollouts_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    summary["rollouts_decoders"] = dict(Counter(r.get("decoder") or "unrecorded" for r in records))
    _write_json(ctx.workdir / "pairs_summary.json", summary)
    by, split, gap = summary["pairs_by_type"], summary["split"], summary["coherence_gap"]
    _say(ctx, f"pairs: {summary['pairs']} from {summary['questions']} questions "
              f"(correctness {by['correctness']}, coherence {by['coherence']}; {summary['pool']['distinct_texts']} "
              f"distinct of {summary['pool']['texts']} {rules.source} texts; "
              f"{summary['questions_mixed']} questions mixed); held out {split['heldout']['questions']} questions "
              f"({split['heldout']['pairs']} pairs); coherence gap > {gap['threshold']:.4g}; trajectory accuracy "
              f"{summary['trajectory_accuracy']:.3f}, mean s_end {summary['mean_s_end']:.3f}, "
              f"s_path {summary['mean_s_path']:.3f}, s_cf {summary['mean_s_cf']:.3f}")
    return summary


def train(ctx: Context) -> dict[str, Any]:
    """Stage 3: preference training (``dpo.objective``) of a LoRA adapter on the training pairs of
    ``pairs.jsonl``, validated every epoch on the held-out pairs and questions when there are any;
    the adapter goes to ``adapter/``."""
    from jaxdebate.coherence.train import run_fingerprint, train as run

    path = _stage_input(ctx, "pairs.jsonl", "pairs")
    rows = jsonl.read_records(path)
    data = [r for r in rows if r.get("split", "train") == "train"]
    held = [r for r in rows if r.get("split") == "heldout"]
    if not data:
        raise DataError(f"{path} holds no training pairs (see pairs_summary.json): collect more questions")
    questions_path = ctx.workdir / "heldout_questions.jsonl"
    questions = jsonl.read_records(questions_path) if questions_path.is_file() else []
    params, model_config = ctx.model
    epoch_eval = _epoch_eval(ctx, questions, run_fingerprint(ctx.config, data)) if questions else None
    try:
        result = run(ctx.config, data, params, model_config, ctx.tokenizer, ctx.workdir, progress=ctx.progress,
                     heldout_pairs=held, epoch_eval=epoch_eval)
    finally:
        if epoch_eval is not None:
            ctx.sampler.update_weights(params, 0)
    s = result.summary
    last = s["by_epoch"][max(s["by_epoch"])] if s["by_epoch"] else {}
    _say(ctx, f"train ({s['objective']}): {s['updates_run']} updates on {s['pairs_trained']} pairs in "
              f"{s['seconds']:.1f} s; last epoch loss {last.get('loss', float('nan')):.4f}, margin "
              f"{last.get('rewards/margin', float('nan')):.4f}; epochs run {s['epochs_run']}, best held-out epoch "
              f"{s['best_epoch']}, exported epoch {s['exported_epoch']}; adapter in {result.adapter_dir}")
    return s


def _epoch_eval(ctx: Context, questions: list[dict[str, Any]], run: str):
    """Greedy accuracy of ``(merged params, epoch)`` on the held-out questions, rows in
    ``train/heldout/<run>/epoch_K.jsonl`` (``run``: the training fingerprint, so rows of another run
    in the same workdir are never reused)."""
    from jaxdebate.coherence import evaluate as ev
    from jaxdebate.data import Item

    cfg = ctx.config
    items = [Item(id=str(q["id"]), problem=q["question"], answer=q["gold"]) for q in questions]
    out = ctx.workdir / "train" / "heldout" / f"{run}-{cfg.sampler.max_new_tokens}"

    def evaluate(merged: Any, epoch: int) -> dict[str, Any]:
        ctx.sampler.update_weights(merged, epoch)
        rows = ev.evaluate(items, ctx.sampler, ctx.tokenizer, ctx.grader, out / f"epoch_{epoch}.jsonl",
                           max_tokens=cfg.sampler.max_new_tokens, batch_size=cfg.eval.batch_size,
                           label=f"held-out epoch {epoch}", temperature=0.0, fmt=cfg.answer_format,
                           progress=ctx.progress, weights=f"training run {run}, epoch {epoch}",
                           decoder=ctx.decoder)
        figures = ev.accuracy_summary(rows)
        return {f"heldout/{k}": figures[k] for k in ("accuracy", "n", "format_rate", "strict_accuracy",
                                                      "lenient_accuracy")}

    return evaluate


def evaluate(ctx: Context) -> dict[str, Any]:
    """Stage 4: accuracy on ``data.eval`` for the base model and base + ``adapter/``, side by side."""
    from jaxdebate.coherence import evaluate as ev
    from jaxdebate.model import lora, peft_export
    from jaxdebate.data import load_items

    cfg = ctx.config
    adapter_dir = ctx.workdir / "adapter"
    adapter, spec = peft_export.load(adapter_dir)  # fail before any sampling when it is missing
    items = load_items(cfg.data.eval, limit=cfg.data.eval_limit)
    out = ctx.workdir / cfg.eval.dir
    kw = dict(max_tokens=cfg.sampler.max_new_tokens, batch_size=cfg.eval.batch_size,
              temperature=cfg.sampler.eval_temperature, fmt=cfg.answer_format, progress=ctx.progress,
              decoder=ctx.decoder)
    started = time.perf_counter()
    sampler = ctx.sampler
    params, _ = ctx.model
    sampler.update_weights(params, 0)
    base_rows = ev.evaluate(items, sampler, ctx.tokenizer, ctx.grader, out / "base.jsonl", label="base",
                            weights=f"base {cfg.model.source}", **kw)
    sampler.update_weights(lora.merge(params, adapter, spec.scale), 1)
    digest = hashlib.sha256((adapter_dir / peft_export.WEIGHTS_FILE).read_bytes()).hexdigest()[:16]
    tuned_rows = ev.evaluate(items, sampler, ctx.tokenizer, ctx.grader, out / "dpo.jsonl", label="dpo",
                             weights=f"base {cfg.model.source} + adapter {digest}", **kw)
    sampler.update_weights(params, 0)
    rows, summary = ev.compare(items, base_rows, tuned_rows)
    summary["dataset"] = cfg.data.eval
    summary["seconds"] = time.perf_counter() - started
    jsonl.write_records(out / "comparison.jsonl", rows)
    _write_json(out / "summary.json", summary)
    _say(ctx, ev.format_comparison(summary, cfg.data.eval))
    return summary


RUNNERS = {"collect": collect, "pairs": pairs, "train": train, "eval": evaluate}


def _check_inputs(config: CoherenceConfig, stages: tuple[str, ...]) -> None:
    """What a later stage reads, checked before the first one runs and before config.json is
    rewritten: a typo in ``data.eval``, a directory as ``collect.rollouts`` (both would fail hours
    in), rollouts of another setting (refused; one older than setting files is adopted by collect)."""
    from jaxdebate.data import load_items

    rollouts = config.collect.rollouts
    if rollouts and Path(rollouts).expanduser().is_dir():
        raise ConfigError(f"collect.rollouts={rollouts!r} is a directory: name the JSONL file (e.g. "
                          f"{rollouts.rstrip('/')}/rollouts.jsonl)")
    if "eval" in stages:
        load_items(config.data.eval, limit=config.data.eval_limit)
    if {"collect", "pairs"} & set(stages):  # last: it may record the setting
        path = rollouts_path(config)
        if jsonl.check_setting(path, collect_setting(config), what="rollouts", remedy=ROLLOUTS_REMEDY,
                               unrecorded="adopt" if "collect" in stages else "skip") == "adopted":
            print(f"collect: {path} predates setting files; recorded this config's setting as its own", flush=True)


def run(config: CoherenceConfig, stages: tuple[str, ...] = STAGES, *, workdir: str | Path | None = None,
        progress: bool = True) -> dict[str, Any]:
    """Run ``stages`` in order in one process (sharing the loaded model); return each stage's summary
    and the seconds it took (also written to ``WORKDIR/stages/<stage>.json``, with the commit and the
    machine that ran it)."""
    unknown = [s for s in stages if s not in RUNNERS]
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; stages are {list(STAGES)} (or 'all')")
    root = Path(workdir if workdir is not None else config.workdir).expanduser()
    config = dataclasses.replace(config, workdir=str(root))
    _check_inputs(config, stages)
    root.mkdir(parents=True, exist_ok=True)
    # an evaluation on its own (a second dataset, another eval.dir) keeps the training run's
    # config.json, the config its results are reported with; its own goes beside its outputs
    eval_only = set(stages) == {"eval"} and (root / "config.json").is_file()
    _write_json(root / config.eval.dir / "config.json" if eval_only else root / "config.json", to_dict(config))
    ctx = Context(config, root, progress)
    made_by = provenance()  # the code this process loaded and its machine, the same for every stage
    results: dict[str, Any] = {}
    try:
        for stage in stages:
            started = time.perf_counter()
            results[stage] = RUNNERS[stage](ctx)
            results[f"{stage}_seconds"] = time.perf_counter() - started
            name = stage if stage != "eval" else config.eval.dir
            _write_json(root / "stages" / f"{name}.json",
                        {"stage": stage, "seconds": results[f"{stage}_seconds"], "summary": results[stage],
                         "provenance": made_by})
    finally:
        ctx.close()
    return results
