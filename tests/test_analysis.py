"""The seed-level analysis of a sweep (jaxdebate.sweep_stats through jaxdebate.analysis): endpoints
and the validation-curve area, per-item McNemar tests of a run, the blocked / paired / Holm /
learning / power comparison, the export of summary.json and table.md, and the committed arithmetic
sweep re-analysed."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from jaxdebate import analysis, sweep_plots, sweep_runs, validation_files
from jaxdebate.errors import DataError
from jaxdebate.run_endpoints import curve_area, divergence_stop, endpoint_values, run_summary
from jaxdebate.run_items import run_item_test, run_item_tests
from jaxdebate.stats import blocked_anova, holm, mcnemar_test, one_sample_t, paired_t, seeds_needed, t_interval
from jaxdebate.sweep_stats import compare_strategies

REPO = Path(__file__).resolve().parent.parent
STRATEGIES = ["identity", "difference_rewards", "potential_based", "coma", "reward_mixing"]


def _write_run(root: Path, strategy: str, seed: int, debate: list[float], single: list[float],
               steps=(0, 2, 4)) -> Path:
    """A run directory with the new validation keys at ``steps`` and one training record per step."""
    workdir = root / f"{strategy}-seed{seed}"
    workdir.mkdir(parents=True)
    records = []
    for step, d, s in zip(steps, debate, single):
        if step:
            records.append({"step": step, "train/reward/raw/mean": 0.1 * step, "train/reward/shaped/mean": 0.1,
                            "train/zero_advantage_fraction": 0.5, "learner/kl": 0.01, "time/step": 30.0,
                            "train/n_kept": 4.0})
        records.append({"step": step, "val/debate/accuracy/debate": d, "val/debate/items": 10.0,
                        "val/single/accuracy": s, "val/single/items": 10.0})
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (workdir / "run.json").write_text(json.dumps({"name": workdir.name, "seed": seed, "status": "done"}))
    return workdir


def _write_items(workdir: Path, step: int, correct: dict[tuple[str, str], list[bool]]) -> None:
    """``validation/step_<step>.jsonl``: per (set, mode) one row per item, ids ``q0``, ``q1``, ..."""
    folder = workdir / "validation"
    folder.mkdir(exist_ok=True)
    lines = []
    for (set_, mode), flags in correct.items():
        agents = 3 if mode == "debate" else 1
        for i, ok in enumerate(flags):
            lines.append(json.dumps({"id": f"q{i}", "gold": "4", "set": set_, "mode": mode,
                                     "answers": [["4" if ok else "5"] * 2] * agents,
                                     "correct": [[ok] * 2] * agents, "answer": "4" if ok else "5",
                                     "correct_final": ok}))
    (folder / f"step_{step}.jsonl").write_text("\n".join(lines) + "\n")


def test_curve_area_and_endpoints(tmp_path):
    assert curve_area([0, 2, 4], [0.2, 0.4, 0.3]) == pytest.approx((2 * 0.3 + 2 * 0.35) / 4)
    assert curve_area([0, 1, 4], [0.0, 0.3, 0.3]) == pytest.approx((0.15 + 3 * 0.3) / 4)  # uneven steps
    assert curve_area([3], [0.5]) is None
    run = sweep_runs.load_run(_write_run(tmp_path, "coma", 1, [0.2, 0.4, 0.3], [0.1, 0.1, 0.5]))
    values = endpoint_values(run)
    assert values["final_debate_accuracy"] == 0.3 and values["initial_debate_accuracy"] == 0.2
    assert values["final_accuracy"] == 0.5 and values["initial_accuracy"] == 0.1  # the single agent
    assert values["final_debate_accuracy/items"] == 10 and values["final_accuracy/step"] == 4
    assert values["auc_debate_accuracy"] == pytest.approx(0.325) and values["auc_accuracy"] == pytest.approx(0.2)
    # a run of the first validation: one key, two validations (no area: it would be their mean)
    old = tmp_path / "old" / "identity-seed7"
    old.mkdir(parents=True)
    (old / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "val/accuracy/debate": 0.31, "val/items": 300.0}) + "\n"
        + json.dumps({"step": 12, "val/accuracy/debate": 0.45, "val/items": 300.0}) + "\n")
    values = endpoint_values(sweep_runs.load_run(old))
    assert values == {"final_accuracy": 0.45, "initial_accuracy": 0.31, "final_accuracy/step": 12,
                      "final_accuracy/items": 300}
    # a resumed run validated step 0 twice: the step counts once (still no area from two steps)
    (old / "metrics.jsonl").write_text(json.dumps({"step": 0, "val/accuracy/debate": 0.3}) + "\n"
                                       + (old / "metrics.jsonl").read_text())
    assert endpoint_values(sweep_runs.load_run(old)) == values


def test_run_item_test_pairs_first_and_last_step_on_ids(tmp_path):
    workdir = _write_run(tmp_path, "identity", 1, [0.2, 0.4, 0.3], [0.1, 0.1, 0.5])
    assert run_item_test(workdir) is None and run_item_tests(workdir) == {}  # no per-item rows: skipped
    first_debate = [True, False, False, False, True, False, False, False, True, False]
    last_debate = [True, True, True, True, False, True, True, False, True, True]
    _write_items(workdir, 0, {("heldout", "debate"): first_debate, ("heldout", "single"): [True] * 10,
                              ("transfer", "debate"): [False] * 4})
    assert run_item_test(workdir) is None  # one file: nothing to pair
    _write_items(workdir, 2, {("heldout", "debate"): [False] * 10})  # a middle step: not used
    _write_items(workdir, 4, {("heldout", "debate"): last_debate, ("heldout", "single"): [True] * 9 + [False],
                              ("transfer", "debate"): [True, True, False, True, True]})  # one id more
    got = run_item_test(workdir, set="heldout", mode="debate")
    assert got == {"n": 10, "first_step": 0, "last_step": 4, "first_acc": 0.3, "last_acc": 0.8,
                   "only_first": 1, "only_last": 6, "p_mcnemar": mcnemar_test(1, 6)}
    assert got["p_mcnemar"] == pytest.approx(2 * (1 + 7) / 2**7)
    single = run_item_test(workdir, set="heldout", mode="single")
    assert (single["only_first"], single["only_last"], single["p_mcnemar"]) == (1, 0, 1.0)
    transfer = run_item_test(workdir, set="transfer", mode="debate")
    assert transfer["n"] == 4 and transfer["only_last"] == 3  # paired on the ids both files hold
    assert run_item_test(workdir, set="transfer", mode="single") is None
    assert set(run_item_tests(workdir)) == {"heldout/debate", "heldout/single", "transfer/debate"}


def _rows(table: dict[str, list[float]], initial: float = 0.3, key: str = "final_accuracy"):
    start = {"final_accuracy": "initial_accuracy", "final_debate_accuracy": "initial_debate_accuracy"}[key]
    return [{"strategy": s, "seed": seed, key: v, start: initial, "step_time_s": 60.0}
            for s, values in table.items() for seed, v in zip((1, 2, 3, 4), values)]


def test_compare_strategies_seed_level():
    table = {"identity": [0.40, 0.35, 0.50, 0.42], "coma": [0.38, 0.30, 0.41, 0.40],
             "reward_mixing": [0.45, 0.36, 0.52, 0.47]}
    rows = _rows(table, key="final_debate_accuracy")
    out = compare_strategies(rows, endpoint="final_debate_accuracy")
    assert out["endpoint"] == "final_debate_accuracy" and out["baseline"] == "identity"
    expected = blocked_anova({s: dict(zip((1, 2, 3, 4), v)) for s, v in table.items()})
    for key in ("strategy_F", "strategy_p", "seed_F", "seed_p", "strategy_df", "seed_df", "residual_df"):
        assert out["blocked"][key] == pytest.approx(expected[key])
    assert out["blocked"]["seeds_used"] == [1, 2, 3, 4] and out["blocked"]["seeds_dropped"] == []
    assert sum(out["blocked"]["ss_share"].values()) == pytest.approx(1.0)
    coma, mixing = out["vs_baseline"]
    for entry, name in ((coma, "coma"), (mixing, "reward_mixing")):
        ref = paired_t(table["identity"], table[name])
        assert entry["strategy"] == name and entry["seeds"] == [1, 2, 3, 4]
        assert entry["mean_difference"] == pytest.approx(ref["mean"]) and entry["ci95"] == pytest.approx(ref["ci95"])
        assert entry["p"] == pytest.approx(ref["p"]) and entry["t"] == pytest.approx(ref["t"]) and entry["df"] == 3
    assert [coma["p_holm"], mixing["p_holm"]] == pytest.approx(holm([coma["p"], mixing["p"]]))
    assert coma["equivalence"]["margin"] == 0.05
    learning = {g["strategy"]: g for g in out["learning"]}
    ref = one_sample_t([v - 0.3 for v in table["identity"]])
    assert learning["identity"]["mean_gain"] == pytest.approx(ref["mean"]) and learning["identity"]["p"] == pytest.approx(ref["p"])
    assert learning["identity"]["initial"] == pytest.approx(0.3) and learning["identity"]["final"] == pytest.approx(np.mean(table["identity"]))
    assert [g["p_holm"] for g in out["learning"]] == pytest.approx(holm([g["p"] for g in out["learning"]]))
    sd = math.sqrt((paired_t(table["identity"], table["coma"])["sd"] ** 2
                    + paired_t(table["identity"], table["reward_mixing"])["sd"] ** 2) / 2)  # equal df: mean variance
    assert out["power"]["paired_sd"] == pytest.approx(sd) and out["power"]["df"] == 6
    assert out["power"]["seeds_needed"] == {"0.05": seeds_needed(sd, 0.05), "0.10": seeds_needed(sd, 0.10)}
    # simultaneous (Bonferroni) intervals for the 2 comparisons, and the precision rule's half-width
    for entry, name in ((coma, "coma"), (mixing, "reward_mixing")):
        diffs = [b - a for a, b in zip(table["identity"], table[name])]
        assert entry["ci_simultaneous"] == pytest.approx(list(t_interval(diffs, level=1 - 0.05 / 2)))
        assert entry["ci_simultaneous"][0] < entry["ci95"][0] and entry["ci95"][1] < entry["ci_simultaneous"][1]
    assert out["max_halfwidth"] == pytest.approx(max((e["ci95"][1] - e["ci95"][0]) / 2 for e in (coma, mixing)))
    assert out["seeds_incomplete"] == [] and "sensitivity_by_cpu" not in out
    # a missing cell (here: a run that has not finished) leaves its whole block out of every test, as
    # PROTOCOL.md says, and the comparison lists it
    for r in rows:
        r["status"] = "running" if (r["strategy"] == "coma" and r["seed"] == 2) else "done"
    out = compare_strategies(rows, endpoint="final_debate_accuracy")
    assert out["blocked"]["seeds_dropped"] == [2] == out["seeds_incomplete"] and out["blocked"]["residual_df"] == 4
    assert out["vs_baseline"][0]["seeds"] == [1, 3, 4] == out["vs_baseline"][1]["seeds"]
    assert all(g["seeds"] == [1, 3, 4] for g in out["learning"])
    # blocks on two CPU kinds: the same comparison within each kind, beside the pooled one; a block
    # whose runs ran on several kinds (or recorded none) belongs to neither and is listed
    for r in rows:
        r["cpu_kinds"] = ["avx512f"] if r["seed"] in (1, 3) else ["(AVX2 only)"]
    by_kind = compare_strategies(rows, endpoint="final_debate_accuracy")["sensitivity_by_cpu"]
    assert set(by_kind) == {"avx512f", "(AVX2 only)"}
    assert by_kind["avx512f"]["vs_baseline"][0]["seeds"] == [1, 3] and by_kind["(AVX2 only)"]["vs_baseline"][0]["seeds"] == [4]
    assert all("claim" not in e for sub in by_kind.values() for e in sub["vs_baseline"])  # reported, not claimed
    next(r for r in rows if r["seed"] == 3 and r["strategy"] == "coma")["cpu_kinds"] = ["(AVX2 only)"]
    for r in rows:
        if r["seed"] == 1:
            r["cpu_kinds"] = []
    out = compare_strategies(rows, endpoint="final_debate_accuracy")
    assert "sensitivity_by_cpu" not in out  # one clear kind left (seed 4): nothing to set beside the pooled test
    for r in rows:
        if r["seed"] == 1:
            r["cpu_kinds"] = ["avx512f"]
    out = compare_strategies(rows, endpoint="final_debate_accuracy")
    assert out["sensitivity_excluded_seeds"] == [3] and set(out["sensitivity_by_cpu"]) == {"avx512f", "(AVX2 only)"}
    assert out["sensitivity_by_cpu"]["avx512f"]["seeds_complete"] == [1]
    # one seed per strategy: differences but no tests
    one = compare_strategies(_rows({"identity": [0.4], "coma": [0.3]}))
    assert one["blocked"] is None and one["power"] is None and one["anova_permutation_p"] is None
    assert one["vs_baseline"][0]["p"] is None and one["vs_baseline"][0]["p_holm"] is None
    assert one["vs_baseline"][0]["mean_difference"] == pytest.approx(-0.1)


def test_a_plan_counts_what_is_missing_against_it(tmp_path):
    """Review of arithmetic-v2's analysis: without a plan an arm or a seed with no counted run left the
    tests silently; with one, every planned cell that does not count is listed with its status, the
    family of comparisons is the planned one, and the table is labelled interim until every block is
    complete. Endpoints the plan does not name as secondary are labelled exploratory."""
    from jaxdebate.sweep_report import format_summary
    from jaxdebate.sweep_stats import Plan, strategy_table, sweep_summary

    table = {"identity": [0.40, 0.35, 0.50, 0.42], "coma": [0.38, 0.30, 0.41, 0.40],
             "reward_mixing": [0.45, 0.36, 0.52, 0.47]}
    rows = _rows(table, key="final_debate_accuracy")
    for r in rows:
        r["status"] = "done"
        r["final_accuracy"] = r["final_debate_accuracy"] - 0.1
    next(r for r in rows if (r["strategy"], r["seed"]) == ("coma", 3))["status"] = "failed"
    plan = Plan(arms=("identity", "coma", "reward_mixing"), seeds=(1, 2, 3, 4, 5, 6), baseline="identity",
                endpoint="final_debate_accuracy", secondary=(), protocol="PROTOCOL.md")
    out = compare_strategies(rows, endpoint="final_debate_accuracy", arms=plan.arms, seeds=plan.seeds)
    assert out["seeds_complete"] == [1, 2, 4] and out["seeds_incomplete"] == [3] and out["seeds_without_runs"] == [5, 6]
    assert {"strategy": "coma", "seed": 3, "status": "failed"} in out["missing"]
    assert out["missing"] == [{"strategy": "coma", "seed": 3, "status": "failed"}]  # seeds 5-6: seeds_without_runs
    assert out["blocked"]["seeds_dropped"] == [3, 5, 6] and out["blocked"]["seeds_used"] == [1, 2, 4]
    # the table counts the complete blocks too: coma's failed seed 3 is not in its mean, nor identity's
    by = {t["strategy"]: t for t in strategy_table(rows, "final_debate_accuracy", out["seeds_complete"])}
    assert by["identity"]["seeds"] == 3 and by["identity"]["final_accuracy"] == pytest.approx(np.mean([0.40, 0.35, 0.42]))
    # a planned arm without a single run empties every block; the family stays the planned one (m = 3)
    wider = compare_strategies(rows, endpoint="final_debate_accuracy", arms=(*plan.arms, "potential_based"), seeds=plan.seeds)
    assert wider["seeds_complete"] == [] and wider["blocked"] is None and len(wider["vs_baseline"]) == 3
    assert all(e["p"] is None and e["seeds"] == [] for e in wider["vs_baseline"])
    assert [m["seed"] for m in wider["missing"] if m["strategy"] == "potential_based"] == [1, 2, 3, 4]  # seeds with runs
    # a strategy outside the plan is named, not analysed
    extra = compare_strategies(rows, endpoint="final_debate_accuracy", arms=("identity", "coma"), seeds=plan.seeds)
    assert extra["not_planned"] == ["reward_mixing"] and [e["strategy"] for e in extra["vs_baseline"]] == ["coma"]
    summary = sweep_summary(rows, plan=plan)
    assert summary["endpoint"] == "final_debate_accuracy" and summary["blocks"] == {"planned": 6, "complete": 3}
    assert summary["exploratory"] == ["final_accuracy"] and summary["plan"]["seeds"] == [1, 2, 3, 4, 5, 6]
    md = format_summary(summary)
    assert md.startswith("**Interim: 3 of 6 pre-registered seed blocks complete. Descriptive only")
    assert "incomplete blocks: seeds 3; not counted: coma 3 (failed)" in md and "without a counted run: 5, 6" in md
    assert "### Exploratory endpoint `final_accuracy`" in md
    done = sweep_summary(rows, plan=dataclasses.replace(plan, seeds=(1, 2, 4), secondary=("final_accuracy",)))
    md = format_summary(done)
    assert md.startswith("All 3 pre-registered seed blocks complete (PROTOCOL.md).")
    assert "### Secondary endpoint `final_accuracy`" in md


def test_the_protocol_holds_in_cases_the_sweep_has_not_met(tmp_path):
    """A review of arithmetic-v2's analysis (2026-12-03) found four rules of PROTOCOL.md that the
    code kept only as long as the data never tested them: the Holm family is the planned one even
    when a comparison cannot be tested; a run the divergence guard stops before its second
    validation keeps its area; an earlier step's value is never a final one, whatever the status
    says; seeds outside the plan are named, not silently dropped. And the claim rule, applied."""
    from jaxdebate.stats import holm_entries
    from jaxdebate.sweep_report import format_summary
    from jaxdebate.sweep_stats import Plan, claim, sweep_summary

    # Holm: an untestable comparison (equal differences: no variance estimate) stays in the family at p = 1
    table = {"identity": [0.40, 0.35, 0.50, 0.42, 0.30], "coma": [0.30, 0.28, 0.38, 0.30, 0.21],
             "reward_mixing": [0.45, 0.36, 0.52, 0.47, 0.33]}
    table["potential_based"] = [v + 0.02 for v in table["identity"]]
    rows = [{"strategy": s, "seed": seed, "status": "done", "final_debate_accuracy": v, "initial_debate_accuracy": 0.3}
            for s, values in table.items() for seed, v in enumerate(values, start=1)]
    out = compare_strategies(rows, endpoint="final_debate_accuracy", arms=list(table), seeds=[1, 2, 3, 4, 5])
    by = {e["strategy"]: e for e in out["vs_baseline"]}
    assert by["potential_based"]["p"] is None and by["potential_based"]["p_holm"] is None
    family = [by["coma"]["p"], by["reward_mixing"]["p"], 1.0]
    assert [by["coma"]["p_holm"], by["reward_mixing"]["p_holm"]] == pytest.approx(holm(family)[:2])
    assert by["reward_mixing"]["p_holm"] == pytest.approx(min(1.0, 2 * by["reward_mixing"]["p"]))  # not 1x: m = 3
    entries = [{"p": 0.01}, {"p": 0.02}, {"p": None}]
    holm_entries(entries)  # other families (the coherence study's) keep the tested ones only
    assert [e["p_holm"] for e in entries] == pytest.approx([0.02, 0.02, None])

    # the claim rule: a difference where Holm's p < 0.05, a ranking where the simultaneous interval
    # excludes 0 as well, equivalence inside the margin, else inconclusive
    base = {"p": 0.001, "mean_difference": -0.08, "equivalence": {"equivalent": False}}
    assert claim({**base, "p_holm": 0.004, "ci_simultaneous": [-0.12, -0.04]}, "identity") == "below identity (ranked)"
    assert claim({**base, "p_holm": 0.04, "ci_simultaneous": [-0.12, 0.01]}, "identity") == "below identity (Holm; not ranked)"
    assert claim({"p": 0.6, "p_holm": 1.0, "mean_difference": 0.004, "ci_simultaneous": [-0.04, 0.05],
                  "equivalence": {"equivalent": True}}, "identity") == "equivalent within ±0.05"
    assert claim({"p": 0.01, "p_holm": 0.03, "mean_difference": 0.02, "ci_simultaneous": [0.001, 0.04],
                  "equivalence": {"equivalent": True}}, "identity") == "above identity (ranked); equivalent within ±0.05"
    assert claim({**base, "p_holm": 0.2, "ci_simultaneous": [-0.2, 0.04]}, "identity") == "inconclusive at this power"
    assert by["potential_based"]["claim"] == "no test" and by["coma"]["claim"] == "below identity (ranked)"
    assert all(e["claim"] == claim(e, "identity") for e in out["vs_baseline"])

    # a run the guard stops before its second validation: its step-0 value is its final one, and its
    # area is that of a flat curve carried to the planned last step, so its block stays in the areas
    stopped = _write_run(tmp_path / "a", "coma", 7, [0.3], [0.2], steps=(0,))
    (stopped / "config.json").write_text(json.dumps({"training": {"nonfinite_patience": 2, "total_train_steps": 6}}))
    (stopped / "run.json").write_text(json.dumps({"name": "coma-seed7", "seed": 7, "status": "failed"}))
    with (stopped / "metrics.jsonl").open("a") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "learner/nonfinite/loss": 1.0, "learner/nonfinite/params": 0.0}) + "\n")
    run = sweep_runs.load_run(stopped)
    assert divergence_stop(run) == 2
    row = run_summary(run)
    assert row["status"] == "diverged" and row["final_debate_accuracy"] == 0.3 and row["final_step"] == 0
    assert row["auc_debate_accuracy"] == pytest.approx(0.3) and row["auc_accuracy"] == pytest.approx(0.2)

    # "done" but without the validation at its planned last step: its step-2 value is not a final one
    short = _write_run(tmp_path / "b", "coma", 1, [0.3, 0.5], [0.2, 0.4], steps=(0, 2))
    (short / "config.json").write_text(json.dumps({"training": {"total_train_steps": 4}}))
    row = run_summary(sweep_runs.load_run(short))
    assert row["status"] == "done" and row["final_debate_accuracy"] is None and row.get("auc_debate_accuracy") is None
    # a run directory without run.json (status unknown) counts once it has validated its last step
    whole = _write_run(tmp_path / "b", "identity", 1, [0.3, 0.4, 0.45], [0.2, 0.3, 0.35])
    (whole / "config.json").write_text(json.dumps({"training": {"total_train_steps": 4}}))
    (whole / "run.json").unlink()
    unknown = run_summary(sweep_runs.load_run(whole))
    assert unknown["status"] == "unknown" and unknown["final_debate_accuracy"] == 0.45
    out = compare_strategies([row, unknown], endpoint="final_debate_accuracy", arms=["identity", "coma"], seeds=[1])
    assert out["seeds_incomplete"] == [1] and out["missing"] == [{"strategy": "coma", "seed": 1, "status": "done, no final value"}]

    # seeds with runs that the plan does not hold are named in the summary and the table
    plan = Plan(arms=tuple(table), seeds=(1, 2, 3), baseline="identity", endpoint="final_debate_accuracy")
    summary = sweep_summary(rows, plan=plan)
    assert summary["comparison"]["seeds_not_planned"] == [4, 5] and summary["comparison"]["seeds_complete"] == [1, 2, 3]
    md = format_summary(summary)
    assert "Seeds not in the plan, not analysed (extend the plan first): 4, 5." in md
    assert "| inconclusive at this power |" in md and "| no test |" in md and "Power (exploratory)" in md
    assert all(e["claim"] for e in summary["comparison"]["vs_baseline"])
    interim = sweep_summary(rows, plan=dataclasses.replace(plan, seeds=(1, 2, 3, 4, 5, 6)))
    assert all(e["claim"] is None for e in interim["comparison"]["vs_baseline"])  # no claims before the end
    assert "claim (the protocol's rule)" not in format_summary(interim) and "inconclusive" not in format_summary(interim)


def test_the_comparison_plot_draws_the_planned_complete_blocks_and_survives_untestable_data(tmp_path):
    """The comparison plot draws what summary.json holds (the plan's arms, seeds and complete
    blocks), and an additive table (no residual: no p anywhere) is drawn, not a crash."""
    from jaxdebate.sweep_stats import Plan

    sweep = tmp_path / "sweep"
    for strategy, shift in (("identity", 0.0), ("coma", -0.1), ("reward_mixing", 0.05)):
        for seed, level in ((1, 0.3), (2, 0.4), (3, 0.5)):
            _write_run(sweep, strategy, seed, [0.3, 0.3, level + shift], [0.2, 0.2, level + shift])
    _write_run(sweep, "identity", 4, [0.3, 0.3, 0.3], [0.2, 0.2, 0.2])  # an incomplete block
    plan = Plan(arms=("identity", "coma", "reward_mixing"), seeds=(1, 2, 3, 4), baseline="identity",
                endpoint="final_debate_accuracy")
    runs = sweep_runs.load_sweep(sweep)
    summary = analysis.summarise(runs, "final_debate_accuracy", plan)
    fig = sweep_plots.plot_comparison(summary)
    left, middle, _ = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["seed 1", "seed 2", "seed 3"]
    assert "3 complete seed blocks" in left.get_title() and "p = -" in left.get_xlabel()
    assert [t.get_text() for t in middle.get_yticklabels()] == ["coma\nno test", "reward_mixing\nno test"]
    sweep_plots.write_plots(runs, tmp_path / "plots", summary)
    assert (tmp_path / "plots" / "comparison.png").stat().st_size > 10_000


def test_plan_files_are_checked_and_fix_the_endpoint(tmp_path):
    from jaxdebate.sweep_stats import Plan

    good = {"arms": ["identity", "coma"], "seeds": [1, 2], "baseline": "identity", "endpoint": "final_debate_accuracy"}
    for change, field in (({"endpoint": "final_score"}, "endpoint"), ({"baseline": "random"}, "baseline"),
                          ({"seeds": [1, 1]}, "seeds"), ({"seeds": ["1"]}, "seeds"), ({"arms": ["coma", "coma"]}, "arms"),
                          ({"secondary": ["final_debate_accuracy"]}, "secondary"), ({"blocks": 2}, "fields"),
                          ({"seeds": 42}, "seeds must be a list"), ({"arms": "identity"}, "arms must be a list")):
        (tmp_path / "plan.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(DataError, match=rf"plan.json: .*{field}"):
            Plan.load(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text(json.dumps(good))
    assert Plan.load(tmp_path / "plan.json").seeds == (1, 2)
    # the plan's endpoint is the export's; one that contradicts it is refused before anything is written
    assert analysis.results_plan(tmp_path, None)[1] == "final_debate_accuracy"
    with pytest.raises(DataError, match="pre-registered primary endpoint is 'final_debate_accuracy'"):
        analysis.results_plan(tmp_path, "final_accuracy")
    assert analysis.results_plan(tmp_path / "elsewhere", None) == (None, "final_accuracy")


def test_a_run_stopped_by_the_divergence_guard_counts_with_its_last_validation(tmp_path):
    """PROTOCOL amendment 2026-11-28: a run the guard stopped (nonfinite_patience non-finite updates in a
    row, none applied) is not missing: its last validation is its final value. A run that failed
    otherwise stays missing."""

    def run(name, nonfinite, status="failed"):
        workdir = _write_run(tmp_path, "coma", 7, [0.3, 0.25], [0.2, 0.15], steps=(0, 2))
        workdir = workdir.rename(tmp_path / name)
        (workdir / "config.json").write_text(json.dumps({"training": {"nonfinite_patience": 2, "total_train_steps": 6}}))
        (workdir / "run.json").write_text(json.dumps({"name": "coma-seed7", "seed": 7, "status": status}))
        with (workdir / "metrics.jsonl").open("a") as f:
            for step, bad in zip((3, 4, 5), nonfinite):
                f.write(json.dumps({"step": step, "learner/nonfinite/loss": float(bad), "learner/nonfinite/params": 0.0}) + "\n")
        return sweep_runs.load_run(workdir)

    diverged = run("diverged", (0, 1, 1))
    assert divergence_stop(diverged) == 5
    row = run_summary(diverged)
    assert row["status"] == "diverged" and row["final_debate_accuracy"] == 0.25 and row["final_step"] == 2
    # the area carries the last validation to the planned last step: (2 * 0.275 + 4 * 0.25) / 6
    assert row["auc_debate_accuracy"] == pytest.approx((2 * 0.275 + 4 * 0.25) / 6)
    for name, flags, status in (("crashed", (0, 0, 0), "failed"), ("one_bad", (0, 0, 1), "failed"),
                                ("gap", (1, 0, 1), "failed"), ("finished", (0, 1, 1), "done")):
        assert divergence_stop(run(name, flags, status)) is None, name
    rows = [run_summary(diverged)] + [{"strategy": "identity", "seed": 7, "status": "done", "final_debate_accuracy": 0.3,
                                       "initial_debate_accuracy": 0.3}]
    out = compare_strategies(rows, endpoint="final_debate_accuracy")
    assert out["seeds_complete"] == [7] and out["diverged"] == [{"strategy": "coma", "seed": 7, "final_step": 2}]
    assert out["vs_baseline"][0]["mean_difference"] == pytest.approx(-0.05)


def test_run_rows_and_the_strategy_table_hold_the_values_they_name(tmp_path):
    """Each field of a run's summary row and of the per-strategy table, against its definition: the
    training time sums the last ``time/step`` of each step (a resumed step counts once), steps whose
    filters kept nothing count as no-update steps, the CPU kinds come from every attempt, and the
    table's SD, t interval, gain and times are over the strategy's seeds."""
    from scipy import stats as sps

    from jaxdebate.stats import two_proportion_test, wilson_interval
    from jaxdebate.sweep_stats import strategy_table

    finals = [0.5, 0.7, 0.4]
    rows = []
    for seed, final in zip((1, 2, 3), finals):
        workdir = _write_run(tmp_path, "identity", seed, [0.3, 0.4, final], [0.2, 0.3, final - 0.1])
        with (workdir / "metrics.jsonl").open("a") as f:  # step 4 redone after a kill: its last record counts
            f.write(json.dumps({"step": 4, "time/step": 45.0, "train/n_kept": 0.0}) + "\n")
        history = [{"attempt": 1, "cpu_flags": "avx512f avx512_bf16"}, {"attempt": 2, "cpu_flags": "(AVX2 only)"}]
        (workdir / "run.json").write_text(json.dumps({"name": workdir.name, "seed": seed, "status": "done",
                                                      "wall_time_s": 600.0 * seed, "history": history}))
        rows.append(run_summary(sweep_runs.load_run(workdir)))
    row = rows[0]
    assert row["step_time_s"] == 30.0 + 45.0 and row["no_update_steps"] == 1 and row["steps"] == 4
    assert row["cpu_kinds"] == ["(AVX2 only)", "avx512f avx512_bf16"]
    assert (row["initial_accuracy"], row["final_accuracy"], row["validation_items"]) == (0.2, 0.4, 10)
    assert row["initial_ci95"] == list(wilson_interval(2, 10)) and row["final_ci95"] == list(wilson_interval(4, 10))
    assert (row["z"], row["p_two_proportion"]) == two_proportion_test(2, 10, 4, 10)
    assert row["final_debate_accuracy"] == 0.5 and row["initial_debate_accuracy"] == 0.3

    (table,) = strategy_table(rows, endpoint="final_debate_accuracy")
    sd = float(np.std(finals, ddof=1))
    half = sps.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert table["seeds"] == 3 and table["final_accuracy"] == pytest.approx(np.mean(finals))
    assert table["sd"] == pytest.approx(sd) and table["ci95"] == pytest.approx([np.mean(finals) - half, np.mean(finals) + half])
    assert table["gain"] == pytest.approx(np.mean(finals) - 0.3)
    assert table["train_time_min"] == pytest.approx(75.0 / 60) and table["wall_time_min"] == pytest.approx(20.0)
    # a seed outside the comparison's complete blocks is left out
    assert strategy_table(rows, endpoint="final_debate_accuracy", seeds=[1, 2])[0]["seeds"] == 2


def test_aggregate_uses_sample_sd_and_t_interval(tmp_path):
    for seed, finals in zip((1, 2, 3), ([0.2, 0.3, 0.4], [0.2, 0.3, 0.6], [0.2, 0.3, 0.5])):
        _write_run(tmp_path, "identity", seed, finals, finals)
    curves = sweep_runs.aggregate(sweep_runs.load_sweep(tmp_path), "val/debate/accuracy/debate")["identity"]
    assert list(curves["steps"]) == [0, 2, 4] and list(curves["n"]) == [3, 3, 3]
    assert curves["std"][2] == pytest.approx(0.1)  # [0.4, 0.6, 0.5]: ddof=1
    assert curves["ci95"][2] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-6)
    assert curves["std"][0] == pytest.approx(0, abs=1e-12) and curves["ci95"][0] == pytest.approx(0, abs=1e-12)


def test_export_results_with_the_debate_endpoint(tmp_path):
    sweep = tmp_path / "sweep"
    finals = {"identity": [0.5, 0.4, 0.6], "difference_rewards": [0.45, 0.3, 0.5], "potential_based": [0.5, 0.35, 0.55],
              "coma": [0.42, 0.38, 0.57], "reward_mixing": [0.52, 0.41, 0.58]}
    for strategy, values in finals.items():
        for seed, final in zip((42, 43, 44), values):
            workdir = _write_run(sweep, strategy, seed, [0.3, (0.3 + final) / 2, final], [0.2, 0.25, final - 0.1])
            _write_items(workdir, 0, {("heldout", "debate"): [True] * 3 + [False] * 7})
            _write_items(workdir, 2, {("heldout", "debate"): [False] * 10})
            _write_items(workdir, 4, {("heldout", "debate"): [True] * round(final * 10) + [False] * (10 - round(final * 10))})
    # the transfer set (validated at the first and the last step) is a secondary endpoint; one run has
    # no residual-free F to speak of, so nothing non-finite may reach summary.json
    for strategy, values in finals.items():
        for seed, final in zip((42, 43, 44), values):
            with (sweep / f"{strategy}-seed{seed}" / "metrics.jsonl").open("a") as f:
                for step, acc in ((0, 0.2), (4, final - 0.05)):
                    f.write(json.dumps({"step": step, "val/transfer/accuracy": acc, "val/transfer/items": 10.0}) + "\n")
    results = tmp_path / "results"
    assert analysis.main([str(sweep), "--out", str(tmp_path / "plots"), "--results", str(results),
                          "--endpoint", "final_debate_accuracy"]) == 0
    text = (results / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    summary = json.loads(text)
    transfer = summary["secondary_endpoints"]["transfer_accuracy"]
    coma = next(c for c in transfer["vs_baseline"] if c["strategy"] == "coma")
    assert coma["mean_difference"] == pytest.approx(np.mean([a - b for a, b in zip(finals["coma"], finals["identity"])]))
    assert all(r["transfer_accuracy"] is not None and r["initial_transfer_accuracy"] == 0.2 for r in summary["runs"])
    assert summary["endpoint"] == "final_debate_accuracy" and set(summary) >= {"runs", "table", "comparison"}
    row = summary["runs"][0]
    assert row["strategy"] == "identity" and row["seed"] == 42
    assert row["final_accuracy"] == 0.4 and row["final_debate_accuracy"] == 0.5  # single agent kept under its old name
    assert row["item_tests"]["heldout/debate"]["only_last"] == 2 and row["item_tests"]["heldout/debate"]["first_step"] == 0
    assert summary["table"][0]["final_accuracy"] == pytest.approx(0.5) and summary["table"][0]["endpoint"] == "final_debate_accuracy"
    comparison = summary["comparison"]
    for key in ("baseline", "anova_f", "anova_permutation_p", "vs_baseline", "blocked", "learning", "power"):
        assert key in comparison
    for entry in comparison["vs_baseline"]:
        assert {"strategy", "seeds", "mean_difference", "ci95", "p", "p_holm"} <= set(entry)
    assert comparison["blocked"]["seeds_used"] == [42, 43, 44]
    assert comparison["learning"][0]["mean_gain"] == pytest.approx(0.2)
    assert set(summary["secondary_endpoints"]) == {"final_accuracy", "auc_accuracy", "auc_debate_accuracy", "transfer_accuracy"}
    table_md = (results / "table.md").read_text()
    assert "Blocked by seed" in table_md and "Holm p" in table_md and "Secondary endpoint `auc_debate_accuracy`" in table_md
    assert sorted(p.name for p in (results / "runs" / "coma-seed43" / "validation").iterdir()) == ["step_0.jsonl", "step_4.jsonl"]
    assert sorted(p.name for p in (results / "plots").iterdir()) == sorted(sweep_plots.PLOTS)
    # re-analysing the exported results in place leaves the copies alone
    analysis.export_results(results / "runs", results, "final_debate_accuracy")
    assert json.loads((results / "summary.json").read_text())["comparison"] == comparison


def test_the_committed_arithmetic_sweep_reanalysed():
    """The issue's figures: identity's gain +0.091, t = 2.23 (df 2), p = 0.155; blocked by seed, seed
    F(2, 8) = 7.05, p = 0.017 with ~45% of the sum of squares, strategy p = 0.15."""
    from scipy import stats as sps
    from anova_reference import two_way_anova

    runs = sweep_runs.load_sweep(REPO / "results" / "arithmetic" / "sweep" / "runs")
    rows = [run_summary(r) for r in runs]
    out = compare_strategies(rows)
    b = out["blocked"]
    # against the textbook: the two-way ANOVA of the rows' finals, the one-sample t of identity's gains
    finals = {s: [r["final_accuracy"] for r in sorted(rows, key=lambda r: r["seed"]) if r["strategy"] == s]
              for s in STRATEGIES}
    ref = two_way_anova(finals)
    assert (b["seed_F"], b["seed_p"], b["strategy_p"]) == pytest.approx((ref["seed_F"], ref["seed_p"], ref["strategy_p"]))
    gains = [r["final_accuracy"] - r["initial_accuracy"] for r in rows if r["strategy"] == "identity"]
    t_ref = sps.ttest_1samp(gains, 0.0)
    learning = next(g for g in out["learning"] if g["strategy"] == "identity")
    assert (learning["t"], learning["p"]) == pytest.approx((t_ref.statistic, t_ref.pvalue))
    # and the figures the README publishes
    assert b["seed_F"] == pytest.approx(7.05, abs=0.01) and b["seed_p"] == pytest.approx(0.0172, abs=1e-4)
    assert b["strategy_p"] == pytest.approx(0.154, abs=1e-3) and b["ss_share"]["seed"] == pytest.approx(0.454, abs=1e-3)
    identity = next(g for g in out["learning"] if g["strategy"] == "identity")
    assert identity["mean_gain"] == pytest.approx(0.0911, abs=1e-4)
    assert identity["t"] == pytest.approx(2.233, abs=1e-3) and identity["df"] == 2 and identity["p"] == pytest.approx(0.155, abs=1e-3)
    assert all(c["p_holm"] == pytest.approx(0.515, abs=1e-3) for c in out["vs_baseline"])
    assert out["power"]["seeds_needed"] == {"0.05": 26, "0.10": 9}


def test_answer_profiles_count_missing_and_repeated_answers_and_are_exported(tmp_path):
    from jaxdebate.answer_profile import answer_profile

    sweep = tmp_path / "sweep"
    for strategy in ("identity", "coma"):
        workdir = _write_run(sweep, strategy, 1, [0.3, 0.2, 0.05], [0.2, 0.2, 0.1])
        _write_items(workdir, 0, {("heldout", "debate"): [True] * 3 + [False] * 7})
    # coma's last validation: 2 debates without a number, the wrong `5` on 7, one right answer; the
    # single-agent rows of the same file are another mode and do not count
    rows = [{"id": f"q{i}", "gold": "4", "set": "heldout", "mode": "debate", "answer": a, "correct_final": a == "4"}
            for i, a in enumerate([None, None, "4"] + ["5"] * 7)]
    rows += [{"id": "q0", "gold": "4", "set": "heldout", "mode": "single", "answer": None, "correct_final": False}]
    (sweep / "coma-seed1" / "validation" / "step_4.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (sweep / "coma-seed1" / "metrics.jsonl").open("a") as f:
        for step, team, tokens in ((1, 0.5, 14.0), (2, 0.0, 9.0), (3, 0.0, 3.5)):
            f.write(json.dumps({"step": step, "train/accuracy/team": team, "train/completion_tokens_mean": tokens}) + "\n")
    profile = answer_profile(sweep_runs.load_run(sweep / "coma-seed1"))
    assert (profile.step, profile.items, profile.no_answer) == (4, 10, 2)
    assert (profile.top_answer, profile.top_count, profile.distinct) == ("5", 7, 2)
    assert profile.accuracy == pytest.approx(0.1) and profile.curve == ((0, 0.3), (2, 0.2), (4, 0.05))
    assert profile.zero_train_steps == (2, 3) and profile.completion_tokens == (14.0, 3.5)
    analysis.export_results(sweep, tmp_path / "results")
    table = (tmp_path / "results" / analysis.ANSWERS_FILE).read_text()
    # identity has only its step-0 rows: its last validation is step 0, all 10 answered
    assert "| identity-seed1 | 10 | 0 | `5` × 7 | 2 | 0.300 | 0.200 | **0.050** | 0 of 0 | – → – |" in table
    assert "| coma-seed1 | 10 | 2 | `5` × 7 | 2 | 0.300 | 0.200 | **0.050** | 2 of 3 | 14.0 → 3.5 |" in table
    # a damaged row names its file and line
    with (sweep / "coma-seed1" / "validation" / "step_4.jsonl").open("a") as f:
        f.write('{"id": "q11", "set": "heldout"}\n')
    with pytest.raises(DataError, match=r"step_4\.jsonl:12: a record needs mode, answer, correct_final"):
        answer_profile(sweep_runs.load_run(sweep / "coma-seed1"))


def test_the_committed_v2_sweep_gives_the_result_the_readme_states():
    """arithmetic-v2's pre-registered analysis on all 59 committed blocks: the claims and figures of the
    README's "Result", and the paired tests against scipy on accuracies counted from the per-item rows."""
    from scipy import stats as sps
    from jaxdebate.sweep_stats import Plan

    root = REPO / "results" / "arithmetic-v2"
    runs = sweep_runs.load_sweep(root / "runs")
    plan = Plan.load(root / "plan.json")
    # the primary endpoint only (the export's secondary endpoints and CPU-kind subsets take ~30 s more)
    c = compare_strategies([run_summary(r) for r in runs], plan.baseline, plan.endpoint, by_cpu=False,
                           arms=plan.arms, seeds=plan.seeds)
    assert len(c["seeds_complete"]) == len(plan.seeds) == 59 and not c["missing"] and not c["diverged"]
    by_arm = {e["strategy"]: e for e in c["vs_baseline"]}
    assert {arm: e["claim"] for arm, e in by_arm.items()} == {
        "difference_rewards": "below identity (ranked)", "potential_based": "below identity (ranked)",
        "coma": "below identity (Holm; not ranked)", "reward_mixing": "equivalent within ±0.05"}
    assert {arm: round(e["mean_difference"], 3) for arm, e in by_arm.items()} == {
        "difference_rewards": -0.061, "potential_based": -0.084, "coma": -0.033, "reward_mixing": -0.007}
    assert by_arm["coma"]["p_holm"] == pytest.approx(0.044, abs=5e-4)
    assert round(c["blocked"]["strategy_F"], 2) == 8.72 and round(c["max_halfwidth"], 3) == 0.036
    assert all(g["mean_gain"] < 0 and g["p_holm"] < 1e-5 for g in c["learning"])
    # the same paired tests, from the rows each run's validation wrote, against scipy and Holm by hand
    def debate_accuracy(run):
        rows = validation_files.read(validation_files.step_path(run.workdir, 12))
        return np.mean([row["correct_final"] for row in rows if row["mode"] == "debate"])

    acc = {(r.strategy, r.seed): debate_accuracy(r) for r in runs}
    seeds = plan.seeds
    tests = {arm: sps.ttest_rel([acc[arm, k] for k in seeds], [acc["identity", k] for k in seeds])
             for arm in by_arm}
    ps = sorted((t.pvalue, arm) for arm, t in tests.items())
    running = 0.0
    for i, (p, arm) in enumerate(ps):
        running = max(running, min(1.0, (len(ps) - i) * p))
        assert by_arm[arm]["p_holm"] == pytest.approx(running, rel=1e-9)
        assert by_arm[arm]["t"] == pytest.approx(tests[arm].statistic, rel=1e-9)


def test_the_committed_v2_runs_answer_as_their_metrics_and_the_readme_say():
    """Every committed arithmetic-v2 run's last rows give the accuracy its metrics logged; three
    collapsed runs answer as the README describes them (counted by hand from the same rows)."""
    from jaxdebate.answer_profile import answer_profile

    runs = {r.name: r for r in sweep_runs.load_sweep(REPO / "results" / "arithmetic-v2" / "runs")}
    profiles = {name: answer_profile(run) for name, run in runs.items()}
    assert len(profiles) >= 110 and all(p is not None and p.items == 300 for p in profiles.values())
    for name, p in profiles.items():
        assert p.curve[-1] == (p.step, pytest.approx(p.accuracy, abs=1e-6)), name
    assert profiles["coma-seed1007"].no_answer == 63
    assert (profiles["identity-seed1007"].top_answer, profiles["identity-seed1007"].top_count) == ("7", 35)
    dr = profiles["difference_rewards-seed1021"]
    assert (dr.top_answer, dr.top_count, round(dr.accuracy, 3)) == ("5", 60, 0.013)
