"""`python -m jaxdebate.eval`: per-item JSONL, the JSON summary line with a Wilson interval, levels,
debates, clear errors; on SmolLM2, the answer protocol that gives the 135M model reward."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdebate.eval import main
from jaxdebate.stats import wilson_interval

ROOT = Path(__file__).resolve().parents[1]


def _summary(capsys):
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_eval_writes_rows_and_a_summary(tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    code = main(["--model", "tiny", "--data", "arithmetic:level=1..2,n=20", "--n", "6", "--offset", "2",
                 "--out", str(out), "--max-tokens", "8", "--batch-size", "4", "--no-progress"])
    assert code == 0
    summary = _summary(capsys)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == summary["n"] == 6
    for row in rows:
        assert {"id", "gold", "answer", "correct", "completion"} <= set(row)
        assert row["level"] in (1, 2) and row["completion_tokens"] <= 8
    k = sum(r["correct"] for r in rows)
    assert summary["accuracy"] == k / 6 and summary["ci95"] == list(wilson_interval(k, 6))
    assert summary["no_answer_fraction"] == sum(r["answer"] is None for r in rows) / 6
    assert set(summary["by_level"]) <= {"1", "2"} and sum(v["n"] for v in summary["by_level"].values()) == 6
    assert json.loads(out.with_suffix(".summary.json").read_text())["n"] == 6


def test_eval_debates_and_samples(capsys):
    code = main(["--model", "tiny", "--data", "arithmetic:n=3", "--agents", "3", "--rounds", "2",
                 "--temperature", "1.0", "--samples", "2", "--max-tokens", "6", "--max-sequence-length", "320",
                 "--no-progress"])
    assert code == 0
    summary = _summary(capsys)
    assert summary["n"] == 6 and summary["agents"] == 3 and summary["rounds"] == 2


def test_eval_debate_rows_and_summary_have_rounds(tmp_path, capsys):
    """Every debate row records each round's answers, verdicts and plurality; the summary's per-round
    accuracy and flip counts agree with the rows; the old fields stay."""
    out = tmp_path / "debate.jsonl"
    assert main(["--model", "tiny", "--data", "arithmetic:templates=2+1/1x1,n=4", "--agents", "3", "--rounds", "2",
                 "--temperature", "1.0", "--samples", "2", "--max-tokens", "6", "--max-sequence-length", "320",
                 "--protocol", "answer_line_debate", "--out", str(out), "--no-progress"]) == 0
    summary = _summary(capsys)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == summary["n"] == 8
    for row in rows:
        assert {"id", "gold", "answer", "correct", "completion", "turns", "template"} <= set(row)
        assert len(row["round_answers"]) == len(row["round_correct"]) == 2
        assert all(len(x) == 3 for x in row["round_answers"] + row["round_correct"])
        assert row["round_plurality_correct"][-1] == row["correct"] and row["round_plurality"][-1] == row["answer"]
        assert row["round_answers"][1] == [t["answer"] for t in sorted(row["turns"], key=lambda t: t["agent"])
                                           if t["round"] == 1]
    assert summary["round_accuracy"] == [sum(r["round_plurality_correct"][k] for r in rows) / 8 for k in (0, 1)]
    assert summary["round_agent_accuracy"][0] == sum(sum(r["round_correct"][0]) for r in rows) / 24
    flips = summary["flips"][0]
    assert flips["rounds"] == [1, 2] and flips["agent"]["n"] == 24 and flips["plurality"]["n"] == 8
    assert flips["plurality"]["wrong_to_right"] == sum(
        r["round_plurality_correct"][1] and not r["round_plurality_correct"][0] for r in rows)
    assert set(summary["by_template"]) == {"2+1", "1x1"} and summary["accuracy"] == summary["round_accuracy"][1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no/such/dir/x", "--data", "arithmetic"], "model source"),
        (["--model", "tiny", "--data", "arithmetic", "--step", "3"], "--step needs a training workdir"),
        (["--model", "tiny", "--data", "nosuch"], "unknown dataset 'nosuch'"),
        (["--model", "tiny", "--data", "arithmetic", "--samples", "4"], "--samples > 1 with greedy"),
        (["--model", "tiny", "--data", "arithmetic", "--n", "0"], "--n must be >= 1"),
        # flags are checked before any load: a missing model is not what these report
        (["--model", "no/such/dir", "--data", "arithmetic", "--protocol", "nope"], "--protocol: unknown answer protocol"),
        (["--model", "no/such/dir", "--data", "arithmetic", "--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
        (["--model", "no/such/dir", "--data", "arithmetic", "--max-sequence-length", "16"], "--max-sequence-length must be >= 32"),
        (["--model", "tiny", "--data", "arithmetic:n=4", "--offset", "9"], "no items from --offset 9"),
    ],
)
def test_eval_errors_are_messages(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_eval_of_a_workdir_without_checkpoints(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["--model", str(tmp_path), "--data", "arithmetic"]) == 2
    assert "without checkpoints" in capsys.readouterr().err


@pytest.mark.smollm2
@pytest.mark.slow
def test_answer_line_protocol_gives_smollm2_reward(capsys):
    """Issue 11's diagnosis, kept true: on one-digit sums the seeds' boxed protocol earns SmolLM2 almost
    nothing, while the answer_line protocol (worked example, Answer: line, number extraction) earns
    most items."""
    accuracy = {}
    for protocol in ("boxed", "answer_line"):
        assert main(["--model", "smollm2", "--data", "arithmetic:level=1,n=16,seed=7", "--protocol", protocol,
                     "--max-tokens", "48", "--no-progress"]) == 0
        accuracy[protocol] = _summary(capsys)["accuracy"]
    assert accuracy["boxed"] <= 0.25 and accuracy["answer_line"] >= 0.6, accuracy


def test_the_eval_command_keeps_its_compiled_programs_for_the_next_evaluation(tmp_path):
    """`python -m jaxdebate.eval` uses the launcher's XLA cache (``$JAXDEBATE_CACHE/xla``): a repeated
    evaluation loads what the last one compiled instead of compiling it again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}  # the cache directory as a user's
    env["JAXDEBATE_CACHE"] = str(tmp_path / "cache")
    # every program, however fast it compiled (the tiny model's may all take < 0.5 s on a fast CPU)
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    out = subprocess.run([sys.executable, "-m", "jaxdebate.eval", "--model", "tiny", "--data", "arithmetic:n=4",
                          "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["n"] == 4
    cached = [p.name for p in (tmp_path / "cache" / "xla").iterdir()]
    assert any(name.startswith("jit_") for name in cached), cached
