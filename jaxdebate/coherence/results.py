"""Collect a coherence run's small artefacts into a committable results directory.

    python -m jaxdebate.coherence.results runs/coherence_cpu --out results/coherence

writes ``summary.json`` (``n_questions``, ``pairs`` by type, per evaluation set the ``base`` and
``dpo`` accuracy with its Wilson 95% interval, ``n`` and format rate, and McNemar's exact p on the
same items; many runs: :mod:`jaxdebate.coherence.report`),
``pairs_summary.json``, the stage timings, and the first rows of every evaluation JSONL (no weights).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from jaxdebate import jsonl
from jaxdebate.errors import DataError
from jaxdebate.stats import mcnemar_test, wilson_interval

HEAD_ROWS = 50


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} does not exist: run the stage that writes it first") from None


def eval_dirs(workdir: Path) -> list[Path]:
    """Every evaluation directory of a run (those holding a ``summary.json`` and ``comparison.jsonl``)."""
    return sorted(p.parent for p in workdir.glob("*/comparison.jsonl") if (p.parent / "summary.json").is_file())


def results_summary(workdir: str | Path) -> dict[str, Any]:
    """The run's headline figures (see the module docstring)."""
    workdir = Path(workdir)
    pairs = _read_json(workdir / "pairs_summary.json")
    config = _read_json(workdir / "config.json")
    out: dict[str, Any] = {
        "model": config["model"]["source"], "protocol": config.get("protocol", "seed"),
        "train_data": config["data"]["train"], "n_questions": pairs["questions"],
        "pairs": {"total": pairs["pairs"], **pairs["pairs_by_type"]},
        "trajectory_accuracy": pairs["trajectory_accuracy"],
        "base": {}, "dpo": {}, "mcnemar_p": {}, "eval_sets": {},
    }
    for d in eval_dirs(workdir):
        s = _read_json(d / "summary.json")
        n = s["questions"]
        out["eval_sets"][d.name] = {"dataset": s.get("dataset"), "n": n}
        for side in ("base", "dpo"):
            k = s[f"{side}_correct"]
            out[side][d.name] = {"accuracy": k / n if n else None, "ci95": list(wilson_interval(k, n)), "n": n,
                                 "correct": k, "format_rate": s.get(f"{side}_format_rate"),
                                 "strict_accuracy": s.get(f"{side}_strict_accuracy"),
                                 "lenient_accuracy": s.get(f"{side}_lenient_accuracy")}
        out["mcnemar_p"][d.name] = mcnemar_test(s["only_base_correct"], s["only_dpo_correct"])
    stages = workdir / "stages"
    if stages.is_dir():
        out["stage_seconds"] = {p.stem: _read_json(p)["seconds"] for p in sorted(stages.glob("*.json"))}
    return out


def export(workdir: str | Path, out_dir: str | Path) -> Path:
    """Write ``summary.json``, ``pairs_summary.json`` and the evaluation JSONL heads to ``out_dir``."""
    workdir, out = Path(workdir), Path(out_dir)
    summary = results_summary(workdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    shutil.copyfile(workdir / "pairs_summary.json", out / "pairs_summary.json")
    shutil.copyfile(workdir / "config.json", out / "config.json")
    for d in eval_dirs(workdir):
        for name in ("base.jsonl", "dpo.jsonl", "comparison.jsonl"):
            if (d / name).is_file():
                rows = jsonl.read_records(d / name)[:HEAD_ROWS]
                jsonl.write_records(out / d.name / f"{Path(name).stem}_head.jsonl", rows)
        shutil.copyfile(d / "summary.json", out / d.name / "summary.json")
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """The README table: one row per evaluation set."""
    lines = ["| evaluation set | n | base | base + DPO adapter | McNemar p |", "|---|---|---|---|---|"]
    for name, info in summary["eval_sets"].items():
        cells = []
        for side in ("base", "dpo"):
            r = summary[side][name]
            cells.append(f"{r['accuracy']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
        lines.append(f"| {info['dataset']} | {info['n']} | {cells[0]} | {cells[1]} | {summary['mcnemar_p'][name]:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxdebate.coherence.results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", help="a coherence run directory (after its eval stage)")
    parser.add_argument("--out", required=True, help="where to write the committable results")
    args = parser.parse_args(argv)
    try:
        out = export(args.workdir, args.out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(format_summary(json.loads((out / "summary.json").read_text())))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
