"""Base accuracy of a model on the graded arithmetic levels (README "Base accuracy"): one
``python -m jaxdebate.eval`` run per level x {greedy, T=1} x {1 agent, 3-agent 2-round debate}.

    .venv/bin/python scripts/base_accuracy.py --out results/arithmetic/base_accuracy [--model smollm2]

Writes every run's per-item JSONL and summary under ``--out`` and a markdown table ``table.md``.
Finished cells are skipped when the command is run again.

    .venv/bin/python scripts/base_accuracy.py --templates --out results/arithmetic/templates --temperature 0.7

measures the single agent per arithmetic template instead (``jaxdebate.data.builtin.TEMPLATES``): one
eval of ``--per-template`` items of every template, greedy and at ``--temperature`` with 4 samples
per item, so that a training pool can keep the templates whose sampled pass rate lies in roughly
[0.1, 0.9]. ``summary.json`` also gives the fraction of items whose 4 samples are mixed (some right,
some wrong): the GRPO groups that carry a learning signal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

LEVEL_ITEMS = {1: 64, 2: 100, 3: 100, 4: 100, 5: 100}  # level 1 has 64 distinct problems
DEBATE_ITEMS = 30  # 50 for level 1 (and level 2 greedy): the first run's size; a debate costs 6 turns per item


def cells(single_n: dict[int, int], debate_n: int):
    for level, n in single_n.items():
        yield level, "single", "greedy", n, ["--agents", "1", "--rounds", "1"]
        yield level, "single", "T=1", n, ["--agents", "1", "--rounds", "1", "--temperature", "1", "--samples", "4"]
        m = min(n, 50 if level == 1 else debate_n)
        yield level, "debate", "greedy", m, ["--agents", "3", "--rounds", "2"]
        yield level, "debate", "T=1", m, ["--agents", "3", "--rounds", "2", "--temperature", "1",
                                                         "--samples", "2"]


def rows_per_item(rows: list[dict], keep: int = 50) -> list[dict]:
    """One record per item (its samples' answers and verdicts), the completions of the first ``keep``
    items only: the eval's one-row-per-sample JSONL is several times larger."""
    items: dict[str, dict] = {}
    for r in rows:
        item = items.setdefault(r["id"], {"id": r["id"], "template": r.get("template"), "level": r.get("level"),
                                          "gold": r["gold"], "answers": [], "correct_samples": []})
        item["answers"].append(r["answer"])
        item["correct_samples"].append(r["correct"])
        if len(items) <= keep and "completion" in r:
            item.setdefault("completions", []).append(r["completion"])
    return list(items.values())


def template_table(args: argparse.Namespace, out: Path) -> int:
    """One eval per decoding over all templates; a per-template table of pass rates."""
    import datetime

    from jaxdebate.data.builtin import TEMPLATES
    from jaxdebate.stats import wilson_interval

    names = list(TEMPLATES)
    data = f"arithmetic:templates={'/'.join(names)},n={args.per_template * len(names)},seed={args.seed}"
    runs = {"greedy": [], f"T={args.temperature:g}": ["--temperature", f"{args.temperature:g}", "--samples", "4"]}
    commands, rows = {}, {}
    for decoding, extra in runs.items():
        name = "single-" + decoding.replace("=", "")
        cmd = [sys.executable, "-m", "jaxdebate.eval", "--model", args.model, "--data", data,
               "--protocol", args.protocol, "--max-tokens", args.max_tokens, "--max-sequence-length", "512",
               "--batch-size", "90", "--out", str(out / f"{name}.jsonl"), "--no-progress", *extra]
        commands[decoding] = " ".join(["python"] + cmd[1:])
        if not (out / f"{name}.summary.json").is_file():
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        path = out / f"{name}.jsonl"
        rows[decoding] = [json.loads(line) for line in path.read_text().splitlines()]
        if "correct" in rows[decoding][0]:  # the eval's rows: rewrite them small enough to commit
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows_per_item(rows[decoding])))
        else:  # already rewritten by an earlier call
            rows[decoding] = [{"id": r["id"], "template": r["template"], "correct": c}
                              for r in rows[decoding] for c in r["correct_samples"]]
    sampled = f"T={args.temperature:g}"
    table = []
    for t in names:
        entry = {"template": t, "level": TEMPLATES[t][0]}
        for decoding, rs in rows.items():
            mine = [r for r in rs if r.get("template") == t]
            k = sum(r["correct"] for r in mine)
            entry[decoding] = {"accuracy": k / len(mine), "ci95": list(wilson_interval(k, len(mine))),
                               "n": len(mine), "items": len({r["id"] for r in mine})}
        per_item: dict[str, list[bool]] = {}
        for r in rows[sampled]:
            if r.get("template") == t:
                per_item.setdefault(r["id"], []).append(r["correct"])
        entry["mixed_groups"] = sum(0 < sum(v) < len(v) for v in per_item.values()) / len(per_item)
        entry["in_pool_band"] = 0.1 <= entry[sampled]["accuracy"] <= 0.9
        table.append(entry)
    with open("/proc/cpuinfo", errors="replace") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    summary = {"data": data, "protocol": args.protocol, "max_tokens": int(args.max_tokens), "model": args.model,
               "temperature": args.temperature, "samples_at_temperature": 4, "commands": commands,
               "date": datetime.date.today().isoformat(),
               "cpu": {"avx2": "avx2" in flags,
                       "avx512_amx_flags": sorted(x for x in flags if x.startswith(("avx512", "amx")))},
               "templates": table,
               "pool": "/".join(e["template"] for e in table if e["in_pool_band"])}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"| template | level | 1 agent, greedy | 1 agent, {sampled} (x4) | mixed groups of 4 | in [0.1, 0.9] |",
             "|---|---|---|---|---|---|"]
    for e in table:
        cells = [f"{e[d]['accuracy']:.2f} [{e[d]['ci95'][0]:.2f}, {e[d]['ci95'][1]:.2f}]" for d in ("greedy", sampled)]
        lines.append(f"| `{e['template']}` | {e['level']} | {cells[0]} | {cells[1]} | {e['mixed_groups']:.2f} | "
                     f"{'yes' if e['in_pool_band'] else 'no'} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"pool": summary["pool"]}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--protocol", default="answer_line")
    p.add_argument("--max-tokens", default="48")
    p.add_argument("--seed", type=int, default=1, help="data seed (the training family uses seed 0)")
    p.add_argument("--templates", action="store_true", help="one row per arithmetic template (see above)")
    p.add_argument("--per-template", type=int, default=50, help="items per template with --templates")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature with --templates")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.templates:
        return template_table(args, out)
    results = []
    for level, shape, decoding, n, extra in cells(LEVEL_ITEMS, DEBATE_ITEMS):
        name = f"L{level}-{shape}-{decoding.replace('=', '')}"
        summary_path = out / f"{name}.summary.json"
        if not summary_path.is_file():
            cmd = [sys.executable, "-m", "jaxdebate.eval", "--model", args.model,
                   "--data", f"arithmetic:level={level},n={LEVEL_ITEMS[level]},seed={args.seed}", "--n", str(n),
                   "--protocol", args.protocol, "--max-tokens", args.max_tokens, "--max-sequence-length", "512",
                   "--out", str(out / f"{name}.jsonl"), "--no-progress", *extra]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        summary = json.loads(summary_path.read_text())
        results.append({"level": level, "shape": shape, "decoding": decoding, **{
            k: summary[k] for k in ("accuracy", "ci95", "n", "no_answer_fraction", "mean_completion_tokens", "seconds")}})
        print(json.dumps(results[-1]), flush=True)
    (out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| level | 1 agent, greedy | 1 agent, T=1 (x4) | 3x2 debate, greedy | 3x2 debate, T=1 (x2) |",
             "|---|---|---|---|---|"]
    for level in LEVEL_ITEMS:
        row = [f"{level}"]
        for shape, decoding in (("single", "greedy"), ("single", "T=1"), ("debate", "greedy"), ("debate", "T=1")):
            r = next(x for x in results if (x["level"], x["shape"], x["decoding"]) == (level, shape, decoding))
            row.append(f"{r['accuracy']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (n={r['n']})")
        lines.append("| " + " | ".join(row) + " |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
