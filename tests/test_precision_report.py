"""scripts/arithmetic_precision_report.py: the precision pilot's agreement rule and cost, read from run directories
written the way a sweep writes them (run.json and metrics.jsonl)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("precision_report", ROOT / "scripts" / "arithmetic_precision_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(results: Path, name: str, seed: int, wall: float, steps: list[dict], *, step0_cached: bool) -> None:
    d = results / "runs" / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"status": "done", "name": name, "seed": seed, "wall_time_s": wall,
                                            "cpu_time_s": wall / 2, "cpu_flags": "avx512f amx_tile"}))
    records = [{"step": 0, "val/cached": 1.0 if step0_cached else 0.0},
               {"step": 1, "time/validation": 100.0}, *steps]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _learn(step: int, mismatch: float, capped: float, tokens: float) -> dict:
    return {"step": step, "learner/logprob_abs_mismatch": mismatch, "learner/is_capped_fraction": capped,
            "learner/tokens": tokens}


def test_rule_counts_capped_tokens_and_block_cost(tmp_path):
    report = _script()
    # seed 1: each arm's first run computes its step-0 validation (100 s, taken off its wall time)
    _run(tmp_path, "fp32-seed1", 1, 400.0, [_learn(2, 1e-5, 0.0, 300)], step0_cached=False)
    _run(tmp_path, "bf16_pair-seed1", 1, 300.0, [_learn(2, 0.02, 0.0, 200), _learn(3, 0.03, 5 / 365, 365)],
         step0_cached=False)
    # seed 2: step 0 read back; a step that only the mismatch rule trips
    _run(tmp_path, "fp32-seed2", 2, 300.0, [_learn(2, 1e-5, 0.0, 100)], step0_cached=True)
    _run(tmp_path, "bf16_pair-seed2", 2, 150.0, [_learn(2, 0.2, 0.0, 100)], step0_cached=True)
    text = report.report(tmp_path)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| arm")}
    assert rows["fp32"][:2] == ["2", "2"] and rows["fp32"][-1] == "0"
    assert rows["bf16_pair"][:2] == ["2", "3"]
    assert rows["bf16_pair"][-2] == "5 / 665"  # 5 capped of 365 at one step, none elsewhere
    assert rows["bf16_pair"][-1] == "2"  # the 1.37% step and the 0.2-nat step
    # block cost: seed 1 (300-100)/(400-100), seed 2 150/300
    assert rows["1"][:3] == ["300", "200", "0.67"] and rows["2"][:3] == ["300", "150", "0.50"]
    assert "Median over 2 blocks: wall 0.58" in text
    assert report.main([str(tmp_path)]) == 0 and (tmp_path / "agreement.md").read_text() == text
