"""Accuracy of a model or a trained run on a dataset, with a Wilson 95% interval (DESIGN §11).

    python -m jaxdebate.eval --model smollm2 --data arithmetic:level=1..3,n=300 --n 300 --out eval.jsonl
    python -m jaxdebate.eval --model runs/arithmetic/identity-seed42 --data ... --step 12
    python -m jaxdebate.eval --model smollm2 --data math500 --n 50 --agents 3 --rounds 2

``--model`` is a model source (``smollm2``, ``gguf:PATH``, an HF directory, ``ORG/NAME``, ``tiny``) or
a training workdir (its latest checkpoint, or ``--step``); a workdir brings its own answer protocol
and token budget unless ``--protocol``/``--max-tokens`` say otherwise. Greedy, one agent, one round
by default; ``--agents/--rounds`` evaluate debates (the plurality answer of the last round),
``--temperature T --samples K`` sampled accuracy over K debates per item.

``--out`` gets one JSON line per item and sample (``id``, ``gold``, ``answer``, ``correct``,
``completion``, ...); the last line on stdout is a JSON summary (``accuracy``, ``ci95``, ``n``,
``no_answer_fraction``, ``mean_completion_tokens``, per-level and per-template accuracy for graded
arithmetic). A debate's rows also hold every round's answers and verdicts (``round_answers``,
``round_correct``: per round, per agent; ``round_plurality``, ``round_plurality_correct``), and its
summary the accuracy per round (``round_accuracy`` of the plurality, ``round_agent_accuracy`` of the
agents' turns) and the answers that flip between rounds (``flips``), so one debate run compares
round 1 (independent agents) with round 2 on the same items.
Exit 2 with a message for a bad model, checkpoint, dataset or option.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxdebate.errors import ConfigError, JaxDebateError
from jaxdebate.sampling.factory import BACKENDS

DEFAULT_MAX_TOKENS = 512


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m jaxdebate.eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model source string or a training workdir")
    p.add_argument("--step", type=int, default=None, help="checkpoint step of a workdir (default: latest)")
    p.add_argument("--data", required=True, help="dataset name or spec (math500, gsm8k_test, arithmetic:level=1..3) or a .jsonl path")
    p.add_argument("--n", type=int, default=None, help="evaluate the first N items (default: all)")
    p.add_argument("--offset", type=int, default=0, help="skip this many items first")
    p.add_argument("--out", default=None, help="per-item JSONL to write (default: none)")
    p.add_argument("--agents", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--samples", type=int, default=1, help="debates per item (use with --temperature > 0)")
    p.add_argument("--protocol", default=None,
                   help="answer protocol (jaxdebate.debate.answer_protocols: boxed, answer_line, answer_line_debate); "
                        "default: the "
                        "workdir's, else boxed")
    p.add_argument("--max-tokens", type=int, default=None,
                   help=f"new tokens per turn (default: the workdir's, else {DEFAULT_MAX_TOKENS})")
    p.add_argument("--max-sequence-length", type=int, default=None, help="prompt + completion budget")
    p.add_argument("--sampler", choices=tuple(BACKENDS), default="jax",
                   help="decoding backend (default: jax, in float32); a workdir's own validations decoded with "
                        "its sampler.backend, so give that backend (and --vllm-dtype) to reproduce their numbers")
    p.add_argument("--vllm-dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--batch-size", type=int, default=64, help="items per sampler call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from jaxdebate.launch import enable_compilation_cache

    args = parse_args(argv)
    enable_compilation_cache()  # the launcher's XLA cache: a repeated evaluation skips most compiling
    try:
        summary = run(args)
    except JaxDebateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


def _check_args(args: argparse.Namespace) -> None:
    positive = {"--agents": args.agents, "--rounds": args.rounds, "--samples": args.samples,
                "--batch-size": args.batch_size}
    for flag, value in positive.items():
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}")
    if args.offset < 0:
        raise ConfigError(f"--offset must be >= 0, got {args.offset}")
    if args.temperature < 0:
        raise ConfigError(f"--temperature must be >= 0, got {args.temperature}")
    if args.samples > 1 and args.temperature == 0:
        raise ConfigError("--samples > 1 with greedy decoding repeats one answer; set --temperature > 0")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if not 0 < args.top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.max_sequence_length is not None and args.max_sequence_length < 32:
        raise ConfigError(f"--max-sequence-length must be >= 32 (debate.max_sequence_length), got {args.max_sequence_length}")
    if args.protocol is not None:
        from jaxdebate.debate.answer_protocols import protocol_fields

        try:
            protocol_fields(args.protocol)
        except ConfigError as e:
            raise ConfigError(f"--protocol: {e}") from None


def load_model(spec: str, step: int | None):
    """``(params, llama_config, tokenizer, run_config or None)`` of a model source or a workdir."""
    from jaxdebate.checkpoint import load_policy
    from jaxdebate.checkpointer import CHECKPOINT_SUBDIR

    path = Path(spec).expanduser()
    if path.is_dir() and (path / CHECKPOINT_SUBDIR).is_dir():
        return load_policy(path, step)
    if step is not None:
        raise ConfigError(f"--step needs a training workdir, but {spec!r} has no '{CHECKPOINT_SUBDIR}' directory")
    if path.is_dir() and (path / "metrics.jsonl").is_file():
        raise ConfigError(f"{spec!r} is a training workdir without checkpoints yet: nothing to evaluate")
    from jaxdebate.model import load, load_tokenizer

    params, llama = load(spec)
    return params, llama, load_tokenizer(spec), None


def debate_config(args: argparse.Namespace, run_config: Any):
    """The debate section to evaluate with: the run's protocol (or ``--protocol``) and shape."""
    from jaxdebate.debate import DebateConfig
    from jaxdebate.debate.answer_protocols import with_protocol

    base = run_config.debate if run_config is not None else DebateConfig()
    config = dataclasses.replace(base, num_agents=args.agents, num_rounds=args.rounds)
    if args.max_sequence_length is not None:
        config = dataclasses.replace(config, max_sequence_length=args.max_sequence_length)
    if args.protocol is not None or run_config is None:
        config = with_protocol(config, args.protocol or "boxed")
    return config


def round_records(batch, b: int, g: int) -> dict[str, list[Any]]:
    """Debate ``(b, g)`` round by round: each agent's answer and verdict, the plurality answer and
    its verdict (None for a turn or round not played, e.g. after an early stop)."""
    from jaxdebate.debate.batch import plurality_votes

    _, _, A, R = batch.shape
    answer_of = {t.index[2:]: t.answer for t in batch.turns if t.index[:2] == (b, g)}
    plural = plurality_votes(batch.votes[b, g], batch.active[b, g])
    gold = int(batch.gold[b])
    out: dict[str, list[Any]] = {"round_answers": [], "round_correct": [], "round_plurality": [],
                                 "round_plurality_correct": []}
    for r in range(R):
        played = [bool(batch.active[b, g, a, r]) for a in range(A)]
        out["round_answers"].append([answer_of.get((a, r)) for a in range(A)])
        out["round_correct"].append([bool(batch.correct[b, g, a, r]) if played[a] else None for a in range(A)])
        cls = int(plural[r])
        out["round_plurality"].append(batch.classes[b][cls] if cls >= 0 else None)
        out["round_plurality_correct"].append(bool(cls >= 0 and cls == gold) if any(played) else None)
    return out


def rows_of(batch, *, seed: int) -> list[dict[str, Any]]:
    """One record per (item, sample): the debate's answer and verdict, the deciding completion, and
    for a debate its turns and per-round records (:func:`round_records`)."""
    answers, correct = batch.debate_answers(), batch.debate_correct()
    last = batch.last_rounds()
    by_debate: dict[tuple[int, int], list[Any]] = {}
    for turn in sorted(batch.turns, key=lambda t: t.index):
        by_debate.setdefault(turn.index[:2], []).append(turn)
    B, G, A, R = batch.shape
    rows = []
    for b, item in enumerate(batch.items):
        for g in range(G):
            cls = int(answers[b, g])
            played = by_debate[(b, g)]
            own = [t for t in played if t.index[3] == last[b, g]]
            # the completion that states the debate's answer (agent 1's when none does)
            lead = next((t for t in own if cls >= 0 and batch.votes[t.index] == cls), own[0])
            row = {
                "id": item.id, "sample": g, "gold": item.answer,
                "answer": batch.classes[b][cls] if cls >= 0 else None,
                "correct": bool(correct[b, g]), "completion": lead.text,
                "completion_tokens": len(lead.completion_ids), "truncated": lead.truncated,
                "seed": seed,
            }
            for key in ("level", "template"):
                if key in item.meta:
                    row[key] = item.meta[key]
            if A > 1 or R > 1:
                row["turns"] = [{"agent": t.index[2], "round": t.index[3], "answer": t.answer,
                                 "completion": t.text} for t in played]
                row.update(round_records(batch, b, g))
            rows.append(row)
    return rows


def _accuracy(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``accuracy``, Wilson ``ci95``, ``n`` and ``correct`` of some rows."""
    from jaxdebate.stats import wilson_interval

    n, k = len(rows), sum(r["correct"] for r in rows)
    return {"accuracy": k / n if n else float("nan"), "ci95": list(wilson_interval(k, n)), "n": n, "correct": k}


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy with its Wilson 95% interval, the no-answer fraction, mean completion length, and
    the same accuracy per arithmetic level when the items have levels."""
    n = len(rows)

    def fraction(values) -> float:
        return sum(values) / n if n else float("nan")

    out: dict[str, Any] = _accuracy(rows) | {
        "no_answer_fraction": fraction(r["answer"] is None for r in rows),
        "mean_completion_tokens": fraction(r["completion_tokens"] for r in rows),
        "truncated_fraction": fraction(r["truncated"] for r in rows),
    }
    levels = sorted({r["level"] for r in rows if "level" in r})
    if levels:
        out["by_level"] = {str(level): _accuracy([r for r in rows if r.get("level") == level]) for level in levels}
    templates = sorted({r["template"] for r in rows if "template" in r})
    if templates:
        out["by_template"] = {t: _accuracy([r for r in rows if r.get("template") == t]) for t in templates}
    if rows and all("round_correct" in r for r in rows):
        out.update(round_summary(rows))
    return out


def round_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Debate rows round by round: ``round_accuracy`` (the plurality's), ``round_agent_accuracy`` (all
    played turns'), and ``flips[r-1]`` between round r and r+1 (1-based), counted over agent turns
    (the same agent in both rounds) and over the plurality: ``right_to_wrong``, ``wrong_to_right``."""
    R = max(len(r["round_correct"]) for r in rows)

    def mean(values: list[bool]) -> float | None:
        return sum(values) / len(values) if values else None

    plural = [[r["round_plurality_correct"][k] for r in rows if r["round_plurality_correct"][k] is not None]
              for k in range(R)]
    turns = [[c for r in rows for c in r["round_correct"][k] if c is not None] for k in range(R)]
    flips = []
    for k in range(1, R):
        pairs = [(r["round_correct"][k - 1][a], r["round_correct"][k][a]) for r in rows
                 for a in range(len(r["round_correct"][k]))]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        votes = [(r["round_plurality_correct"][k - 1], r["round_plurality_correct"][k]) for r in rows]
        votes = [(x, y) for x, y in votes if x is not None and y is not None]
        flips.append({
            "rounds": [k, k + 1],
            "agent": {"right_to_wrong": sum(x and not y for x, y in pairs),
                      "wrong_to_right": sum(y and not x for x, y in pairs), "n": len(pairs)},
            "plurality": {"right_to_wrong": sum(x and not y for x, y in votes),
                          "wrong_to_right": sum(y and not x for x, y in votes), "n": len(votes)},
        })
    return {"round_accuracy": [mean(v) for v in plural], "round_agent_accuracy": [mean(v) for v in turns],
            "flips": flips}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate as ``args`` say; returns the summary (also written next to ``--out``)."""
    from tqdm import tqdm

    from jaxdebate.config import SamplerConfig
    from jaxdebate.data import load_items
    from jaxdebate.debate import Grader, debate_chunks, derive_seed
    from jaxdebate.errors import DataError
    from jaxdebate.sampling.base import SamplingParams
    from jaxdebate.sampling.factory import make_sampler
    from jaxdebate.sampling.vllm.config import VLLMConfig

    _check_args(args)
    items = load_items(args.data)
    items = items[args.offset:args.offset + args.n if args.n is not None else None]
    if not items:
        raise DataError(f"{args.data!r} has no items from --offset {args.offset}")
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:
        if out.is_dir():
            raise ConfigError(f"--out {out} is a directory; give a .jsonl file path")
        out.parent.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    params, llama, tokenizer, run_config = load_model(args.model, args.step)
    debate = debate_config(args, run_config)
    max_tokens = args.max_tokens or (run_config.sampler.max_new_tokens if run_config else DEFAULT_MAX_TOKENS)
    if max_tokens >= debate.max_sequence_length:
        raise ConfigError(f"--max-tokens {max_tokens} leaves no room for a prompt within "
                          f"max_sequence_length={debate.max_sequence_length}")
    env = "math" if args.agents == 1 and args.rounds == 1 else "math_debate"
    items = [it.with_env(env) for it in items]
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=max_tokens)
    # only the backend and server settings matter here: each request carries its own SamplingParams
    sampler_config = SamplerConfig(backend=args.sampler, fallback="error", max_new_tokens=max_tokens,
                                   vllm=VLLMConfig(dtype=args.vllm_dtype))
    workdir = (out.parent if out is not None else Path.cwd()) / ".jaxdebate-eval"
    print(f"[jaxdebate.eval] {args.model}: loaded in {time.perf_counter() - start:.1f}s; {len(items)} item(s) x "
          f"{args.samples} sample(s), {args.agents} agent(s) x {args.rounds} round(s), T={args.temperature}, "
          f"max_tokens={max_tokens}, extraction={debate.extraction}, sampler={args.sampler}", file=sys.stderr)
    sampler = make_sampler(sampler_config, params, llama, tokenizer, workdir=workdir,
                           max_total_len=debate.max_sequence_length, seed=args.seed)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.callback(sampler.close)
        grader = stack.enter_context(Grader())
        sink = stack.enter_context(open(out, "w", encoding="utf-8")) if out is not None else None
        bar = stack.enter_context(tqdm(total=len(items), desc="eval", unit="item", dynamic_ncols=True,
                                       disable=args.no_progress, file=sys.stderr))
        for offset, batch in debate_chunks(sampler, tokenizer, items, batch_size=args.batch_size, seed=args.seed,
                                           config=debate, n_rollouts=args.samples, sampling=sampling, grader=grader):
            new = rows_of(batch, seed=derive_seed(args.seed, offset))
            rows.extend(new)
            if sink is not None:
                for row in new:
                    sink.write(json.dumps(row, ensure_ascii=False) + "\n")
                sink.flush()
            bar.update(len(batch.items))
            bar.set_postfix(acc=f"{sum(r['correct'] for r in rows) / len(rows):.3f}")
    summary = summarize(rows)
    summary.update({
        "model": args.model, "step": args.step, "data": args.data, "offset": args.offset,
        "agents": args.agents, "rounds": args.rounds, "temperature": args.temperature, "samples": args.samples,
        "protocol": args.protocol, "extraction": debate.extraction, "max_tokens": max_tokens,
        "sampler": args.sampler, "seconds": round(time.perf_counter() - start, 1),
    })
    if out is not None:
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
