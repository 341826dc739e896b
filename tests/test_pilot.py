"""A pilot's decision by the pre-registered rules: paired SDs, cost, item noise, the setting kept or
changed, and the number of seed blocks; from exported settings on disk, through the CLI."""

from __future__ import annotations

import json
import math

import pytest

from jaxdebate.pilot import decide, main, run_cost, setting_report
from jaxdebate.stats import blocks_for_halfwidth, t_quantile


def _export(root, setting, values, cpu):
    """An exported setting: summary rows for identity/coma per seed and each run's run.json."""
    rows = []
    for (strategy, seed), value in values.items():
        rows.append({"strategy": strategy, "seed": seed, "status": "done", "final_debate_accuracy": value})
        run = root / setting / "runs" / f"{strategy}-seed{seed}"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"status": "done", "cpu_time_s": cpu}))
    (root / setting / "summary.json").write_text(json.dumps({"runs": rows}))


def test_blocks_for_halfwidth_is_the_smallest_n_meeting_the_target():
    for sd, target in ((0.087, 0.04), (0.05, 0.04), (0.12, 0.05)):
        n = blocks_for_halfwidth(sd, target, minimum=2)
        width = lambda k: t_quantile(0.975, k - 1) * sd / math.sqrt(k)  # noqa: E731
        assert width(n) <= target < width(n - 1)
    assert blocks_for_halfwidth(0.087, 0.04, minimum=5) == 21  # the v1 sweep's SD: PROTOCOL.md's figure
    assert blocks_for_halfwidth(0.0, 0.04, minimum=5) == 5
    assert blocks_for_halfwidth(1.0, 1e-3, max_blocks=50) is None
    with pytest.raises(ValueError):
        blocks_for_halfwidth(0.1, 0.0)


def test_setting_report_pairs_by_seed_and_ignores_unfinished_runs():
    rows = [{"strategy": "identity", "seed": s, "status": "done", "final_debate_accuracy": v}
            for s, v in ((1, 0.30), (2, 0.40), (3, 0.35))]
    rows += [{"strategy": "coma", "seed": s, "status": "done", "final_debate_accuracy": v}
             for s, v in ((1, 0.34), (2, 0.40))]
    rows.append({"strategy": "coma", "seed": 3, "status": "running", "final_debate_accuracy": None})
    costs = {"identity-seed1": 100.0, "identity-seed2": 300.0, "coma-seed1": 200.0}
    r = setting_report(rows, costs, baseline="identity", arm="coma", endpoint="final_debate_accuracy", items=300)
    assert r["seeds"] == [1, 2] and r["differences"] == pytest.approx([0.04, 0.0])
    assert r["sd_d"] == pytest.approx(math.sqrt(0.0008)) and r["runs"] == 5
    assert r["cost_cpu_s"] == pytest.approx(200.0)
    # the item noise over the paired runs only, as the between-seed variance (identity seed 3 is unpaired)
    assert r["item_var"] == pytest.approx(sum(p * (1 - p) for p in (0.3, 0.4, 0.34, 0.4)) / 4 / 300)
    assert r["item_share"] == pytest.approx(r["item_var"] / r["between_seed_var"])


def test_the_default_is_kept_within_the_tie_and_left_for_a_clear_win():
    def settings(b2: float, b4: float | None) -> dict:
        return {"b2": {"variance_x_cost": b2, "sd_d": 0.06, "seeds": [1, 2, 3, 4]},
                "b4": {"variance_x_cost": b4, "sd_d": 0.04, "seeds": [1, 2, 3, 4]}}

    kept = decide(settings(1.0, 0.85), default="b2")
    assert kept["setting"] == "b2"  # 15% better: within the 25% tie
    assert kept["why"].startswith("b2:") and "b4 is smaller by no more than 25%" in kept["why"]
    assert "(others: b4 " in decide(settings(0.5, 1.0), default="b2")["why"]  # the default wins: the other is named
    # the boundary: b4 is chosen only when b2's product exceeds 1.25 x b4's
    assert decide(settings(1.0, 0.79), default="b2")["setting"] == "b4"
    assert decide(settings(1.0, 0.81), default="b2")["setting"] == "b2"
    d = decide(settings(1.0, 0.5), default="b2")
    assert d["setting"] == "b4" and d["blocks"] == blocks_for_halfwidth(0.04, 0.04, minimum=5)
    assert d["n_seeds"] == {"b2": 4, "b4": 4}
    assert decide(settings(None, 0.5), default="b2")["setting"] is None
    # a setting without its score yet (one paired seed) must not lose by default
    early = decide(settings(1.0, None), default="b2")
    assert early["setting"] is None and "b4" in early["why"]


def test_cli_writes_the_decision_next_to_the_settings(tmp_path, capsys):
    _export(tmp_path, "b2", {("identity", 1): 0.30, ("coma", 1): 0.36, ("identity", 2): 0.40, ("coma", 2): 0.42,
                             ("identity", 3): 0.33, ("coma", 3): 0.31}, cpu=1000.0)
    _export(tmp_path, "b4", {("identity", 1): 0.32, ("coma", 1): 0.33, ("identity", 2): 0.41, ("coma", 2): 0.43,
                             ("identity", 3): 0.30, ("coma", 3): 0.32}, cpu=1600.0)
    assert main([str(tmp_path), "--default", "b2"]) == 0
    out = json.loads((tmp_path / "decision.json").read_text())
    b2, b4 = out["settings"]["b2"], out["settings"]["b4"]
    assert b2["variance_x_cost"] == pytest.approx(b2["sd_d"] ** 2 * 1000.0)
    assert out["decision"]["setting"] == ("b4" if b4["variance_x_cost"] * 1.25 < b2["variance_x_cost"] else "b2")
    assert "| b2 | 3 |" in capsys.readouterr().out
    assert main([str(tmp_path / "missing")]) == 2


def test_cli_names_what_is_wrong_with_its_input(tmp_path, capsys):
    values = {("identity", 1): 0.30, ("coma", 1): 0.36, ("identity", 2): 0.40, ("coma", 2): 0.42}
    _export(tmp_path, "b2", values, cpu=1000.0)
    # a killed run's metrics end in a cut line: left out, as every metrics reader does
    metrics = tmp_path / "b2" / "runs" / "coma-seed1" / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "time/validation": 10.0}) + "\n" + '{"step": 2, "time/va')
    assert main([str(tmp_path), "--default", "b2"]) == 0
    capsys.readouterr()
    assert main([str(tmp_path), "--default", "b2", "--arm", "comma"]) == 2
    assert "no run of --arm comma under" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--endpoint", "final_debate_acc"])
    assert "invalid choice: 'final_debate_acc'" in capsys.readouterr().err
    (tmp_path / "b2" / "summary.json").write_text(json.dumps([{"strategy": "identity"}]))  # a sweep dir's own
    assert main([str(tmp_path), "--default", "b2"]) == 2
    assert "summary.json is not an exported summary" in capsys.readouterr().err


def test_the_run_that_computed_step_0_does_not_pay_for_the_seeds_other_runs():
    computed = [{"step": 0, "val/debate/accuracy/debate": 0.3}, {"step": 1, "time/validation": 500.0}]
    reused = [{"step": 0, "val/cached": 1.0}, {"step": 1, "time/validation": 0.0}]
    assert run_cost({"cpu_time_s": 2000.0, "wall_time_s": 1000.0}, computed) == pytest.approx(1000.0)
    assert run_cost({"cpu_time_s": 2000.0, "wall_time_s": 1000.0}, reused) == pytest.approx(2000.0)
    assert run_cost({"wall_time_s": 1000.0}, computed) is None
