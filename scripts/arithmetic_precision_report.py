"""The precision pilot's agreement and cost, as results/arithmetic-precision/PROTOCOL.md reads them (the accuracy
comparison is the sweep export's table.md): per arm the sampler/learner log-prob mismatch and the share of tokens at
the importance-weight cap over every run and step, the protocol's rule on them, and each block's cost ratio.

    .venv/bin/python scripts/arithmetic_precision_report.py [results/arithmetic-precision]   # writes agreement.md there
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from jaxdebate.metrics import METRICS_FILE, read_metrics
from jaxdebate.pilot import step0_validation_seconds

BASELINE, ARM = "fp32", "bf16_pair"
MISMATCH, CAPPED, TOKENS = "learner/logprob_abs_mismatch", "learner/is_capped_fraction", "learner/tokens"
RULE_MISMATCH, RULE_CAPPED = 0.1, 0.01  # PROTOCOL.md: a bf16_pair step above either rules the pair out


def wall_cost(state: dict, records: list[dict]) -> float | None:
    """A run's wall seconds without its step-0 validation (computed by the first run of each arm, reused by the
    rest). Wall, not ``cpu_time_s``: the shared vLLM server samples and validates in its own process, which the
    run's CPU seconds do not count."""
    wall = state.get("wall_time_s")
    return None if wall is None else float(wall) - step0_validation_seconds(records)


def _runs(results: Path) -> dict[str, dict]:
    """Finished runs by name: their run.json, per-step mismatch and capped share, cost without step 0."""
    out = {}
    for path in sorted((results / "runs").glob("*/run.json")):
        state = json.loads(path.read_text())
        if state.get("status") != "done":
            continue
        records = read_metrics(path.parent / METRICS_FILE)
        steps = [r for r in records if MISMATCH in r]
        out[path.parent.name] = {
            "arm": path.parent.name.rsplit("-seed", 1)[0], "seed": state["seed"], "state": state,
            "mismatch": [float(r[MISMATCH]) for r in steps], "capped": [float(r[CAPPED]) for r in steps],
            "tokens": [float(r.get(TOKENS, 0.0)) for r in steps],
            "cost": wall_cost(state, records), "cpu": state.get("cpu_time_s"),
        }
    return out


def report(results: Path) -> str:
    runs = _runs(results)
    lines = ["# Agreement and cost (PROTOCOL.md, descriptive)", "",
             f"`{MISMATCH}` (nats per token) and `{CAPPED}` over every finished run's learner steps (a step whose "
             "groups all had equal rewards runs no learner and logs neither).", "",
             "| arm | runs | learner steps | mismatch mean | mismatch max | capped max | capped tokens / learned tokens "
             "| steps over the rule (mismatch > 0.1 or capped > 0.01) |",
             "|---|---|---|---|---|---|---|---|"]
    for arm in (BASELINE, ARM):
        rs = [r for r in runs.values() if r["arm"] == arm]
        mm = [x for r in rs for x in r["mismatch"]]
        cap = [x for r in rs for x in r["capped"]]
        over = sum(m > RULE_MISMATCH or c > RULE_CAPPED for r in rs for m, c in zip(r["mismatch"], r["capped"]))
        tokens = sum(t for r in rs for t in r["tokens"])
        capped = sum(c * t for r in rs for c, t in zip(r["capped"], r["tokens"]))
        if mm:
            lines.append(f"| {arm} | {len(rs)} | {len(mm)} | {statistics.fmean(mm):.4f} | {max(mm):.4f} | {max(cap):.4f} "
                         f"| {capped:.0f} / {tokens:.0f} | {over} |")
    lines += ["", "Cost per block (`bf16_pair / fp32`, same seed): wall seconds without the step-0 validation "
              "(`wall_cost`), and the training process's CPU seconds (the shared server's not counted).", "",
              "| seed | fp32 wall s | bf16_pair wall s | ratio | fp32 CPU s | bf16_pair CPU s | ratio | CPU flags |",
              "|---|---|---|---|---|---|---|---|"]
    ratios, cpu_ratios = [], []
    for seed in sorted({r["seed"] for r in runs.values()}):
        a, b = runs.get(f"{BASELINE}-seed{seed}"), runs.get(f"{ARM}-seed{seed}")
        if not (a and b and a["cost"] and b["cost"]):
            continue
        ratios.append(b["cost"] / a["cost"])
        cpu_ratios.append(b["cpu"] / a["cpu"])
        flags = a["state"].get("cpu_flags", "") if a["state"].get("cpu_flags") == b["state"].get("cpu_flags") else "differ"
        lines.append(f"| {seed} | {a['cost']:.0f} | {b['cost']:.0f} | {ratios[-1]:.2f} | {a['cpu']:.0f} | "
                     f"{b['cpu']:.0f} | {cpu_ratios[-1]:.2f} | {flags.split(' ')[0]} … ({len(flags.split())} flags) |")
    if ratios:
        lines += ["", f"Median over {len(ratios)} blocks: wall {statistics.median(ratios):.2f}, "
                      f"CPU {statistics.median(cpu_ratios):.2f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    results = Path(argv[0] if argv else "results/arithmetic-precision")
    text = report(results)
    (results / "agreement.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
