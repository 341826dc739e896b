"""Does a 3-agent, 2-round debate help the base model? (README "Base-model debate", DESIGN §11)

    .venv/bin/python scripts/base_debate.py --out results/arithmetic/base_debate \
        --setting answer_line_debate:1.0 --setting answer_line_debate:0.7 --setting answer_line_debate:0

One ``python -m jaxdebate.eval --agents 3 --rounds 2`` run per setting (``PROTOCOL:TEMPERATURE``, 0 =
greedy) on the same items. A debate's first round is three independent single-agent answers (the
round-1 prompt is the single agent's prompt), so one run gives both sides of the comparison, paired
on items: single agent = round-1 turns, debate = the plurality of round 2. Per setting the summary
holds the accuracy per round (plurality and agent turns), the answers that flip between rounds, and
paired tests over items of debate vs single agent and of round 2 vs round 1 (McNemar on binary
outcomes; at T > 0 the single agent's per-item mean over its three round-1 samples is compared with
a paired sign-flip permutation test, since one sample per agent is not a binary per-item outcome).

Full per-item JSONL goes to ``--raw`` (finished settings are skipped when run again); ``--out`` gets
``summary.json`` and a compact copy of each setting's rows (completions kept for the first
``--keep-completions`` rows only, so the artefacts stay small enough to commit).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import subprocess
import sys
from pathlib import Path

from jaxdebate.stats import mcnemar_test, normal_two_sided_p, wilson_interval


def cpu_description() -> dict[str, object]:
    """The CPU's model name, core count and the wide-vector flags that change CPU timings and numerics."""
    name, flags, cores = "unknown", set(), 0
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name, cores = value.strip(), cores + 1
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wide = sorted(f for f in flags if f.startswith(("avx512", "amx")))
    return {"model": name, "cores": cores, "avx2": "avx2" in flags, "avx512_amx_flags": wide}


def parse_setting(text: str) -> tuple[str, float]:
    protocol, sep, temperature = text.partition(":")
    try:
        value = float(temperature)
    except ValueError:
        value = -1.0
    if not sep or not protocol or value < 0:
        raise SystemExit(f"--setting {text!r} must be PROTOCOL:TEMPERATURE (0 = greedy), e.g. answer_line_debate:1.0")
    return protocol, value


def setting_name(protocol: str, temperature: float) -> str:
    return f"{protocol}-{'greedy' if temperature == 0 else f'T{temperature:g}'}"


def eval_command(args: argparse.Namespace, protocol: str, temperature: float, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "jaxdebate.eval", "--model", args.model, "--data", args.data, "--n", str(args.n),
           "--protocol", protocol, "--max-tokens", str(args.max_tokens), "--max-sequence-length",
           str(args.max_sequence_length), "--agents", "3", "--rounds", "2", "--batch-size", str(args.batch_size),
           "--no-progress", "--out", str(out)]
    if temperature > 0:
        cmd += ["--temperature", f"{temperature:g}", "--samples", str(args.samples)]
    return cmd


def sign_flip_test(differences: list[float], *, draws: int = 100_000, seed: int = 0) -> float:
    """Two-sided p of mean(differences) = 0 by random sign flips (paired permutation test over items)."""
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero))
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed - 1e-12 for _ in range(draws))
    return (hits + 1) / (draws + 1)


def paired_mean_test(first: list[float], second: list[float]) -> dict[str, object]:
    """``second - first`` over items: mean difference, paired t (normal approximation, large n) and a
    sign-flip permutation p-value."""
    d = [b - a for a, b in zip(first, second)]
    n = len(d)
    mean = sum(d) / n
    sd = (sum((x - mean) ** 2 for x in d) / (n - 1)) ** 0.5 if n > 1 else 0.0
    z = mean / (sd / n ** 0.5) if sd > 0 else 0.0
    return {"n": n, "first": sum(first) / n, "second": sum(second) / n, "difference": mean, "t": z,
            "p_t_normal": normal_two_sided_p(z) if sd > 0 else 1.0, "p_sign_flip": sign_flip_test(d)}


def mcnemar(first: list[bool], second: list[bool]) -> dict[str, object]:
    only_first = sum(a and not b for a, b in zip(first, second))
    only_second = sum(b and not a for a, b in zip(first, second))
    n = len(first)
    return {"n": n, "first": sum(first) / n, "second": sum(second) / n, "only_first": only_first,
            "only_second": only_second, "p": mcnemar_test(only_first, only_second)}


def analyse(rows: list[dict], temperature: float) -> dict[str, object]:
    """Per-round accuracy, flips and the paired tests of one setting's eval rows (one debate per row)."""
    by_item: dict[str, list[dict]] = {}
    for row in rows:
        by_item.setdefault(row["id"], []).append(row)
    single = [sum(c for r in rs for c in r["round_correct"][0]) / sum(len(r["round_correct"][0]) for r in rs)
              for rs in by_item.values()]
    first_plural = [sum(r["round_plurality_correct"][0] for r in rs) / len(rs) for rs in by_item.values()]
    debate = [sum(r["round_plurality_correct"][-1] for r in rs) / len(rs) for rs in by_item.values()]
    out: dict[str, object] = {}
    if temperature == 0:  # the three round-1 turns are one greedy answer
        agent1 = [bool(rs[0]["round_correct"][0][0]) for rs in by_item.values()]
        out["debate_vs_single_round1"] = mcnemar(agent1, [x == 1.0 for x in debate]) | {
            "test": "McNemar exact, per item: agent 1's round-1 answer vs the round-2 plurality"}
    else:
        out["debate_vs_single_round1"] = paired_mean_test(single, debate) | {
            "test": "paired over items: per-item mean correctness of the round-1 agent turns (the single "
                    "agent) vs of the round-2 plurality; sign-flip permutation p (100k draws) and t"}
    if all(len(rs) == 1 for rs in by_item.values()):
        out["round2_vs_round1_plurality"] = mcnemar([x == 1.0 for x in first_plural], [x == 1.0 for x in debate]) | {
            "test": "McNemar exact, per item: round-1 plurality (vote without debate) vs round-2 plurality"}
    k = sum(x == 1.0 for x in debate) if all(len(rs) == 1 for rs in by_item.values()) else None
    if k is not None:
        out["debate_ci95"] = list(wilson_interval(k, len(debate)))
    return out


def compact(rows: list[dict], keep: int) -> list[dict]:
    """Rows without their texts after the first ``keep``: the per-round answers and verdicts stay,
    the completions and the ``turns`` list (the same answers again) go."""
    return [row if i < keep else {k: v for k, v in row.items() if k not in ("completion", "turns", "seed")}
            for i, row in enumerate(rows)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="summary.json and compact per-setting JSONL")
    p.add_argument("--raw", default="/tmp/base_debate/raw", help="full eval outputs (not committed)")
    p.add_argument("--setting", action="append", required=True, help="PROTOCOL:TEMPERATURE (0 = greedy)")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--data", default="arithmetic:level=2..3,n=300,seed=7")
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--samples", type=int, default=1, help="debates per item at T > 0")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--max-sequence-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--keep-completions", type=int, default=50)
    args = p.parse_args()
    out, raw = Path(args.out), Path(args.raw)
    out.mkdir(parents=True, exist_ok=True)
    raw.mkdir(parents=True, exist_ok=True)
    summary_path = out / "summary.json"
    results = json.loads(summary_path.read_text()) if summary_path.is_file() else {"settings": {}}
    for text in args.setting:
        protocol, temperature = parse_setting(text)
        name = setting_name(protocol, temperature)
        cmd = eval_command(args, protocol, temperature, raw / f"{name}.jsonl")
        if not (raw / f"{name}.summary.json").is_file():
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        ev = json.loads((raw / f"{name}.summary.json").read_text())
        rows = [json.loads(line) for line in (raw / f"{name}.jsonl").read_text().splitlines()]
        (out / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in compact(rows, args.keep_completions)))
        stamp = datetime.datetime.fromtimestamp((raw / f"{name}.summary.json").stat().st_mtime, datetime.timezone.utc)
        results["settings"][name] = {
            "protocol": protocol, "temperature": temperature, "shape": "3 agents x 2 rounds",
            "single_agent": "the round-1 turns (each a single-agent answer to the single-agent prompt)",
            "n_items": len({r["id"] for r in rows}), "samples": ev["samples"],
            "round_accuracy": ev["round_accuracy"], "round_agent_accuracy": ev["round_agent_accuracy"],
            "flips": ev["flips"], "debate_accuracy": ev["accuracy"], "ci95": ev["ci95"],
            "no_answer_fraction": ev["no_answer_fraction"], "mean_completion_tokens": ev["mean_completion_tokens"],
            "by_level": ev.get("by_level"), "seconds": ev["seconds"],
            **analyse(rows, temperature),
            "command": " ".join(["python"] + cmd[1:]).replace(str(raw), "RAW"),
            "date": stamp.strftime("%Y-%m-%d"), "cpu": cpu_description(),
        }
        summary_path.write_text(json.dumps(results, indent=2) + "\n")
        s = results["settings"][name]
        print(json.dumps({"setting": name, "round_accuracy": s["round_accuracy"],
                          "round_agent_accuracy": s["round_agent_accuracy"],
                          "debate_vs_single_round1": s["debate_vs_single_round1"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
