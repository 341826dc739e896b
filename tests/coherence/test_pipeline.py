"""Smoke run of every stage through the CLI on a tiny model, plus resumable collection.

A random tiny model never writes ``Answer: …``, so nothing would be correct and there would be no
pairs to train on. The model here is a real tiny Llama (exported to an HF directory and loaded like any
other) whose weights make it a Markov chain over a few tokens: attention and MLP outputs are zeroed and
the output head is solved so that each token of the chain predicts its successors with fixed
probabilities. It writes ``Answer: 7`` / ``Answer: 8``, sometimes after ``So the answer is N.``, so
its trajectories are a mix of correct and incorrect, short and long — both pair types occur.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from jaxdebate import jsonl
from jaxdebate.coherence.__main__ import main

ROOT = Path(__file__).resolve().parents[2]

CHAIN = {
    "Ċ": {"Answer": 0.6, "So": 0.4},
    "Answer": {":": 1.0},
    ":": {"Ġ": 1.0},
    "Ġ": {"7": 0.55, "8": 0.45},
    "7": {"<|im_end|>": 0.7, ".": 0.3},
    "8": {"<|im_end|>": 0.7, ".": 0.3},
    ".": {"Ċ": 1.0},
    "So": {"Ġthe": 1.0},
    "Ġthe": {"Ġanswer": 1.0},
    "Ġanswer": {"Ġis": 1.0},
    "Ġis": {"Ġ": 1.0},
}


def answer_chain_model(directory):
    """Export a tiny Llama that samples from CHAIN (every prompt ends in 'Ċ', the chain's start)."""
    from jaxdebate.model import export_hf, load, load_tokenizer

    params, config = load("tiny:tie=false,seed=3")
    tok = load_tokenizer("tiny")
    layers = {g: dict(m) for g, m in params["layers"].items()}
    for group, module in (("self_attn", "o_proj"), ("mlp", "down_proj")):
        layers[group][module] = {"kernel": np.zeros_like(layers[group][module]["kernel"])}
    sources = [tok.hf.convert_tokens_to_ids(s) for s in CHAIN]
    e = np.asarray(params["embed_tokens"]["embedding"], np.float64)[sources]
    h = e / np.sqrt(np.mean(e**2, axis=-1, keepdims=True) + config.rms_norm_eps)  # final norm, scale 1
    target = np.full((len(sources), config.vocab_size), -20.0)
    for row, successors in enumerate(CHAIN.values()):
        for token, p in successors.items():
            target[row, tok.hf.convert_tokens_to_ids(token)] = np.log(p)
    head = np.linalg.pinv(h) @ target  # exact: the 11 normed embeddings are independent in 64 dims
    params = {**params, "layers": layers, "lm_head": {"kernel": head.astype(np.float32)}}
    export_hf(params, config, directory, tokenizer=tok)
    return directory


def write_questions(path, golds):
    rows = [{"question": f"Pat has {g - 3} marbles and finds 3 more. How many marbles does Pat have now?",
             "answer": f"{g - 3} + 3 = {g}\n#### {g}"} for g in golds]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("coherence")
    model = answer_chain_model(root / "model")
    args = [
        "--config", "configs/coherence_smoke.py", "--workdir", str(root / "run"), "--no-progress",
        "--set", f"model.source={model}",
        "--set", f"data.train={write_questions(root / 'train.jsonl', [7, 8, 7, 8])}",
        "--set", f"data.eval={write_questions(root / 'eval.jsonl', [7, 8, 8])}",
    ]
    assert main(["all", *args]) == 0
    return root / "run", args


def test_all_stages_write_their_artefacts(smoke_run):
    run, _ = smoke_run
    records = jsonl.read_records(run / "rollouts.jsonl")
    assert len(records) == 4
    for rec in records:
        assert [t["arm_name"] for t in rec["trajectories"]][-3:] == ["wolfram_standard", "wolfram_rephrase", "maudlin_cf1"]
        assert len(rec["trajectories"]) == 11
        for t in rec["trajectories"]:
            assert {"text", "answer", "correct", "tokens", "quality", "reward"} <= set(t)
            assert t["correct"] == (t["answer"] == rec["gold"])
            assert len(t["tokens"]) == t["n_tokens"]
        assert all(0.0 <= rec["scores"][k] <= 1.0 for k in ("s_end", "s_path", "s_cf"))
    flags = [t["correct"] for rec in records for t in rec["trajectories"]]
    assert any(flags) and not all(flags)

    pairs = jsonl.read_records(run / "pairs.jsonl")
    summary = json.loads((run / "pairs_summary.json").read_text())
    kinds = [p["pair_type"] for p in pairs]
    assert summary["pairs_by_type"] == {"correctness": kinds.count("correctness"), "coherence": kinds.count("coherence")}
    assert kinds.count("correctness") > 0 and kinds.count("coherence") > 0
    assert all(p["chosen_correct"] and not p["rejected_correct"] for p in pairs if p["pair_type"] == "correctness")

    assert sorted(p.name for p in (run / "train" / "checkpoints").iterdir() if p.name.isdigit()) == ["1"]
    metrics = jsonl.read_records(run / "train" / "metrics.jsonl")
    assert metrics and all(m["grad_norm"] > 0 for m in metrics[1:])
    assert (run / "adapter" / "adapter_model.safetensors").is_file()

    rows = jsonl.read_records(run / "eval" / "comparison.jsonl")
    ev = json.loads((run / "eval" / "summary.json").read_text())
    assert len(rows) == 3 and ev["questions"] == 3
    assert ev["base_correct"] == sum(r["base"]["correct"] for r in rows)
    assert ev["dpo_correct"] == sum(r["dpo"]["correct"] for r in rows)
    # greedy follows the chain's most likely path: "Answer: 7"
    assert [r["base"]["answer"] for r in rows] == ["7", "7", "7"]
    assert json.loads((run / "config.json").read_text())["workdir"] == str(run)


def test_collect_resumes_and_redoes_a_cut_last_line(smoke_run):
    run, args = smoke_run
    path = run / "rollouts.jsonl"
    before = path.read_bytes()
    assert main(["collect", *args]) == 0
    assert path.read_bytes() == before  # nothing left to do
    lines = before.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    assert main(["collect", *args]) == 0
    redone = path.read_bytes().splitlines(keepends=True)
    assert len(redone) == 4
    # the same arm seeds give the same trajectories when the question is sampled again
    assert json.loads(redone[-1]) == json.loads(lines[-1])


def test_cli_errors_are_one_line(smoke_run, capsys, tmp_path):
    _, args = smoke_run
    assert main(["train", "--config", "configs/coherence_smoke.py", "--workdir", str(tmp_path), "--no-progress"]) == 2
    assert "run the 'pairs' stage first" in capsys.readouterr().err
    assert main(["pairs", *args, "--set", "pairs.quality_gap=-0.5"]) == 2
    assert "pairs.quality_gap" in capsys.readouterr().err


def test_answer_line_protocol_reaches_every_prompt_and_extraction(smoke_run, tmp_path):
    """protocol=answer_line: arms, pairs and evaluation ask with the worked example and extract
    numbers leniently; the 'seed' protocol's prompts are unchanged."""
    from jaxdebate.coherence import arms as A
    from jaxdebate.coherence.batching import encode_pairs
    from jaxdebate.model import load_tokenizer

    run, args = smoke_run
    moved = list(args)
    workdir = tmp_path / "answer_line"
    moved[moved.index("--workdir") + 1] = str(workdir)
    assert main(["collect", *moved, "--set", "protocol=answer_line"]) == 0
    assert main(["pairs", *moved, "--set", "protocol=answer_line"]) == 0
    records = jsonl.read_records(workdir / "rollouts.jsonl")
    answers = [t["answer"] for rec in records for t in rec["trajectories"]]
    assert set(answers) <= {"7", "8", None} and {"7", "8"} <= set(answers)

    fmt = A.AnswerFormat.named("answer_line")
    msgs = A.arm_messages(A.default_arms()[0], "Compute $2 + 2$.", fmt)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == "3 + 4 = 7\nAnswer: 7" and msgs[3]["content"].endswith("Answer: <number>")
    assert fmt.extract("so 2 + 2 = 4") == "4" and A.SEED_FORMAT.extract("so 2 + 2 = 4") is None
    assert A.canonical_messages("Q?") == [{"role": "user", "content": f"Q?\n\n{A.ANSWER_INSTRUCTION}"}]
    tok = load_tokenizer("tiny")
    pairs = jsonl.read_records(workdir / "pairs.jsonl")
    assert pairs
    seed_prompt = encode_pairs(pairs[:1], tok, 1024).pairs[0].prompt
    line_prompt = encode_pairs(pairs[:1], tok, 1024, fmt).pairs[0].prompt
    assert "3 + 4 = 7" in tok.decode(line_prompt) and "3 + 4 = 7" not in tok.decode(seed_prompt)


def test_results_export_holds_the_headline_figures(smoke_run, tmp_path):
    """summary.json of `python -m jaxdebate.coherence.results`: pairs by type, base and DPO accuracy
    with Wilson intervals per evaluation set, McNemar's p; stage timings; JSONL heads, no weights."""
    from jaxdebate.coherence import results

    run, _ = smoke_run
    assert {p.stem for p in (run / "stages").glob("*.json")} == {"collect", "pairs", "train", "eval"}
    assert results.main([str(run), "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    pairs = json.loads((run / "pairs_summary.json").read_text())
    assert summary["n_questions"] == 4 and summary["pairs"]["total"] == pairs["pairs"]
    assert summary["pairs"]["correctness"] + summary["pairs"]["coherence"] == pairs["pairs"]
    ev = json.loads((run / "eval" / "summary.json").read_text())
    for side in ("base", "dpo"):
        row = summary[side]["eval"]
        assert row["n"] == 3 and row["correct"] == ev[f"{side}_correct"]
        assert row["ci95"][0] <= row["accuracy"] <= row["ci95"][1] and row["ci95"] == ev[f"{side}_ci95"]
    assert summary["mcnemar_p"]["eval"] == ev["mcnemar_p"] and 0 <= ev["mcnemar_p"] <= 1
    assert set(summary["stage_seconds"]) == {"collect", "pairs", "train", "eval"}
    heads = sorted(p.name for p in (tmp_path / "out" / "eval").iterdir())
    assert heads == ["base_head.jsonl", "comparison_head.jsonl", "dpo_head.jsonl", "summary.json"]
    assert not list((tmp_path / "out").rglob("*.safetensors"))


# --- issue 28: the v2 pipeline (shared rollouts, canonical pairs, held-out validation, variants x seeds,
# the multi-run report) on the answering chain model -------------------------------------------------


@pytest.fixture(scope="module")
def v2_runs(tmp_path_factory):
    """Three runs over one shared collection: dpo seeds 1 and 2, sft seed 1; then the report."""
    from jaxdebate.coherence import report

    root = tmp_path_factory.mktemp("coherence_v2")
    model = answer_chain_model(root / "model")
    common = [
        "--config", "configs/coherence_v2_smoke.py", "--no-progress",
        "--set", f"model.source={model}",
        "--set", f"collect.rollouts={root / 'rollouts.jsonl'}",
        "--set", f"data.train={write_questions(root / 'train.jsonl', [7, 8, 7, 8, 7, 8])}",
        "--set", f"data.eval={write_questions(root / 'eval.jsonl', [7, 8, 8])}",
    ]
    runs = root / "runs"
    assert main(["all", *common, "--workdir", str(runs / "dpo-seed1"), "--set", "dpo.seed=1"]) == 0
    for name, extra in (("dpo-seed2", ["dpo.seed=2"]), ("sft-seed1", ["dpo.seed=1", "dpo.objective=sft", "variant=sft"])):
        for stage in ("pairs", "train", "eval"):
            sets = [x for e in extra for x in ("--set", e)]
            assert main([stage, *common, "--workdir", str(runs / name), *sets]) == 0
    # a second evaluation set for one run (what --platinum does in scripts/coherence_v2.py)
    second = ["--set", f"data.eval={write_questions(root / 'eval2.jsonl', [8, 7])}", "--set", "eval.dir=eval_second"]
    assert main(["eval", *common, "--workdir", str(runs / "sft-seed1"), "--set", "dpo.seed=1", "--set",
                 "dpo.objective=sft", "--set", "variant=sft", *second]) == 0
    assert report.main([str(runs), "--out", str(root / "results")]) == 0
    return root, runs


def test_v2_pairs_are_canonical_split_by_question_and_counted(v2_runs):
    root, runs = v2_runs
    run = runs / "dpo-seed1"
    assert (root / "rollouts.jsonl").is_file() and not (run / "rollouts.jsonl").exists()  # one shared collection
    records = jsonl.read_records(root / "rollouts.jsonl")
    assert len(records) == 6 and all(len(r["canonical"]) == 11 for r in records)
    pairs = jsonl.read_records(run / "pairs.jsonl")
    assert pairs and all(p["source"] == "canonical" and p["chosen_tokens"] for p in pairs)
    twins = {(r["id"], t["text"]): t["tokens"] for r in records for t in r["canonical"]}
    assert all(twins[(p["question_id"], p["chosen"])] == p["chosen_tokens"] for p in pairs)
    held = {q["id"] for q in jsonl.read_records(run / "heldout_questions.jsonl")}
    assert len(held) == 2
    assert {p["question_id"] for p in pairs if p["split"] == "heldout"} <= held
    assert not {p["question_id"] for p in pairs if p["split"] == "train"} & held

    summary = json.loads((run / "pairs_summary.json").read_text())
    mixed = sum(any(t["correct"] for t in r["canonical"]) and not all(t["correct"] for t in r["canonical"])
                for r in records)
    assert summary["questions_mixed"] == mixed == summary["questions_mixed_by_source"]["canonical"] > 0
    gap = summary["coherence_gap"]
    assert gap["z"] == 2.0 and gap["se"] > 0 and gap["threshold"] == max(0.01, 2.0 * gap["se"])
    coherent = [p for p in pairs if p["pair_type"] == "coherence"]
    assert 0 < len(coherent) == summary["pairs_by_type"]["coherence"]  # the rule below is exercised
    assert all(p["quality_gap"] > gap["threshold"] for p in coherent)
    assert summary["split"]["heldout"]["questions"] == 2 and summary["split"]["train"]["questions"] == 4
    assert summary["split"]["train"]["pairs"] == sum(p["split"] == "train" for p in pairs)
    # the same shared rollouts give every variant the same pairs, and the summary names the file's digest
    assert jsonl.read_records(runs / "sft-seed1" / "pairs.jsonl") == pairs
    import hashlib

    digest = hashlib.sha256((root / "rollouts.jsonl").read_bytes()).hexdigest()
    assert summary["rollouts_sha256"] == digest
    assert json.loads((runs / "sft-seed1" / "pairs_summary.json").read_text())["rollouts_sha256"] == digest


def test_v2_training_validates_every_epoch_and_reports_format(v2_runs):
    _, runs = v2_runs
    run = runs / "dpo-seed1"
    epochs = jsonl.read_records(run / "train" / "epochs.jsonl")
    train_summary = json.loads((run / "train" / "summary.json").read_text())
    assert [e["epoch"] for e in epochs][0] == 0 and len(epochs) == train_summary["epochs_run"] + 1
    assert train_summary["exported_epoch"] == train_summary["best_epoch"] >= 1
    for e in epochs:
        assert e["heldout/n"] == 2 and 0 <= e["heldout/accuracy"] <= 1 and 0 <= e["heldout/format_rate"] <= 1
    (rows_dir,) = (run / "train" / "heldout").iterdir()
    base_rows = jsonl.read_records(rows_dir / "epoch_0.jsonl")
    assert epochs[0]["heldout/accuracy"] == sum(r["correct"] for r in base_rows) / 2
    assert epochs[0]["heldout/format_rate"] == sum(r["format_ok"] for r in base_rows) / 2
    for r in base_rows:  # strict: an 'Answer: N' line, right; lenient: the number extraction, right
        assert r["format_ok"] == (r["answer_strict"] is not None)
        assert r["correct_strict"] == (r["answer_strict"] == r["gold"])
    ev = json.loads((run / "eval" / "summary.json").read_text())
    rows = jsonl.read_records(run / "eval" / "comparison.jsonl")
    assert ev["dpo_format_rate"] == sum(r["dpo"]["format_ok"] for r in rows) / len(rows)
    assert ev["base_strict_accuracy"] == sum(r["base"]["correct_strict"] for r in rows) / len(rows)
    sft = json.loads((runs / "sft-seed1" / "train" / "summary.json").read_text())
    assert sft["objective"] == "sft" and train_summary["objective"] == "dpo"


def test_v2_report_per_variant_seed_and_evaluation_set(v2_runs):
    from jaxdebate.coherence.evaluate import accuracy_summary
    from jaxdebate.stats import mcnemar_test, t_interval

    root, runs = v2_runs
    out = root / "results"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 3 and summary["unfinished"] == [] and summary["warnings"] == []
    assert set(summary["variants"]) == {"dpo", "sft"}
    dpo, sft = summary["variants"]["dpo"], summary["variants"]["sft"]
    assert set(dpo["seeds"]) == {"1", "2"} and set(sft["seeds"]) == {"1"}
    assert sft["settings"]["objective"] == "sft" and dpo["settings"]["pairs_source"] == "canonical"
    accs = []
    for seed, name in (("1", "dpo-seed1"), ("2", "dpo-seed2")):
        rows = jsonl.read_records(runs / name / "eval" / "comparison.jsonl")
        want = accuracy_summary([r["dpo"] for r in rows])
        got = dpo["seeds"][seed]["eval"]["eval"]
        for key in ("accuracy", "ci95", "n", "format_rate", "strict_accuracy", "lenient_accuracy", "truncated_rate"):
            assert got[key] == want[key], key
        only_b = sum(r["base"]["correct"] and not r["dpo"]["correct"] for r in rows)
        only_t = sum(r["dpo"]["correct"] and not r["base"]["correct"] for r in rows)
        assert dpo["mcnemar_p"]["eval"][seed] == got["mcnemar_p"] == mcnemar_test(only_b, only_t)
        accs.append(want["accuracy"])
    level = dpo["seed_level"]["eval"]
    assert level["n_seeds"] == 2 and level["mean"] == pytest.approx(sum(accs) / 2)
    # two seeds that tie (3 items here) have no spread: no interval rather than a zero-width one
    assert level["ci95"] == (None if accs[0] == accs[1] else list(t_interval(accs)))
    assert "seed_level" not in sft  # one seed: no seed-level interval
    # the second evaluation is its own set, and the run keeps its training config
    assert set(sft["seeds"]["1"]["eval"]) == {"eval", "eval_second"} and sft["seeds"]["1"]["eval"]["eval_second"]["n"] == 2
    trained = json.loads((runs / "sft-seed1" / "config.json").read_text())
    assert trained["eval"]["dir"] == "eval" and trained["data"]["eval"].endswith("eval.jsonl")
    assert json.loads((runs / "sft-seed1" / "eval_second" / "config.json").read_text())["eval"]["dir"] == "eval_second"
    assert summary["base"]["eval"]["n"] == 3 and summary["base"]["eval"]["format_rate"] is not None
    assert set(dpo["curves"]) >= {"heldout/accuracy", "heldout/format_rate"} and "0" in dpo["curves"]["heldout/accuracy"]
    png = (out / "epoch_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000 and summary["plots"] == ["epoch_curves.png"]
    table = (out / "table.md").read_text()
    assert "| dpo | 1 | eval |" in table and "| sft | 1 | eval |" in table and "| dpo | mean of 2 | eval |" in table
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["dpo-seed1", "dpo-seed2", "sft-seed1"]
    assert (out / "runs" / "dpo-seed1" / "train" / "epochs.jsonl").is_file()
    # the variant that gets more seeds is picked on the held-out questions (its exported epoch), at seed 1
    epochs = jsonl.read_records(runs / "dpo-seed1" / "train" / "epochs.jsonl")
    exported = dpo["seeds"]["1"]["train"]["exported_epoch"]
    held = next(e["heldout/accuracy"] for e in epochs if e["epoch"] == exported)
    assert summary["selection"]["variant"] == "dpo" and summary["selection"]["heldout_accuracy"] == {"dpo": held}
    from jaxdebate.stats import holm

    assert summary["mcnemar_p_holm"]["eval"] == dict(zip(["dpo", "sft"], holm([dpo["mcnemar_p"]["eval"]["1"],
                                                                                sft["mcnemar_p"]["eval"]["1"]])))
    sft_rows = {r["id"]: r["dpo"]["correct"] for r in jsonl.read_records(runs / "sft-seed1" / "eval" / "comparison.jsonl")}
    dpo_rows = {r["id"]: r["dpo"]["correct"] for r in jsonl.read_records(runs / "dpo-seed1" / "eval" / "comparison.jsonl")}
    vs = summary["best_vs_sft"]
    assert vs["variant"] == "dpo" and vs["seeds"] == [1] and "ci95" not in vs["by_set"]["eval"]  # one paired seed
    assert vs["by_set"]["eval"]["mcnemar_p"] == {"1": mcnemar_test(
        sum(sft_rows[i] and not dpo_rows[i] for i in sft_rows), sum(dpo_rows[i] and not sft_rows[i] for i in sft_rows))}
    # the same two runs in the post hoc pairs, and the answer line's own paired test against the base
    pair = summary["pairwise_post_hoc"]["eval"]["dpo vs sft"]
    assert pair["p"] == vs["by_set"]["eval"]["mcnemar_p"]["1"] and pair["p_holm"] == pair["p"]  # one pair
    rows = jsonl.read_records(runs / "dpo-seed1" / "eval" / "comparison.jsonl")
    assert dpo["seeds"]["1"]["eval"]["eval"]["mcnemar_p_format"] == mcnemar_test(
        sum(r["base"]["format_ok"] and not r["dpo"]["format_ok"] for r in rows),
        sum(r["dpo"]["format_ok"] and not r["base"]["format_ok"] for r in rows))
    # the method-level family: dpo (two seeds) vs the base, with its Holm value and a verdict
    assert summary["method_family"] == {"eval": ["dpo - base"]}
    vs_base = level["vs_base"]
    assert vs_base["n_seeds"] == 2 and vs_base["verdict"] in ("higher", "lower", "inconclusive at this power")
    assert vs_base["p_holm"] == vs_base["p"]  # a family of one (None when the seeds tie)
    assert (vs_base["p"] is None) == (accs[0] == accs[1]) == bool(vs_base.get("no_spread"))
    # every evaluation file records what made its answers; the tuned one names its adapter's digest
    setting = json.loads((runs / "dpo-seed1" / "eval" / "dpo.jsonl.setting.json").read_text())
    assert "+ adapter " in setting["weights"] and setting["max_tokens"] == trained["sampler"]["max_new_tokens"]
    # ... and the decoder that made them, as the rollouts records do; every stage records its commit and
    # machine (one collection and one decoder here: summary["warnings"] is empty, above)
    from jaxdebate.provenance import provenance

    records = jsonl.read_records(root / "rollouts.jsonl")
    assert setting["decoder"] == records[0]["decoder"] and setting["decoder"].startswith(("jax float32 on ", "vllm "))
    assert json.loads((runs / "dpo-seed1" / "pairs_summary.json").read_text())["rollouts_decoders"] == {
        setting["decoder"]: len(records)}
    assert dpo["seeds"]["1"]["decoders"] == {"eval/base.jsonl": setting["decoder"], "eval/dpo.jsonl": setting["decoder"]}
    stage = json.loads((runs / "dpo-seed1" / "stages" / "eval.json").read_text())["provenance"]
    assert {k: stage[k] for k in ("commit", "cpu_flags", "host")} == {k: provenance()[k] for k in ("commit", "cpu_flags", "host")}
    assert set(dpo["seeds"]["1"]["provenance"]) == {"collect", "pairs", "train", "eval"}
    assert dpo["seeds"]["1"]["provenance"]["eval"] == stage
    # the seed is a real choice: the two dpo seeds trained different adapters
    from jaxdebate.model import peft_export

    a1, _ = peft_export.load(runs / "dpo-seed1" / "adapter")
    a2, _ = peft_export.load(runs / "dpo-seed2" / "adapter")
    assert not np.allclose(a1["self_attn"]["q_proj"]["lora_A"], a2["self_attn"]["q_proj"]["lora_A"])


def test_v2_report_warns_when_runs_mix_rollouts_or_decoders(v2_runs, tmp_path):
    """Runs whose pairs come from another collection (or do not say which), rollouts sampled by two
    decoders, or evaluation answers from another decoder (e.g. a run made on another machine) are
    named in the summary's warnings instead of passing silently."""
    import shutil

    from jaxdebate.coherence import report

    _, runs = v2_runs
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)

    def edit(path, **changes):
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    edit(copy / "sft-seed1" / "pairs_summary.json", rollouts_sha256="0" * 64)
    other = "vllm bfloat16 on a local CPU server, CPU avx512_bf16"
    edit(copy / "dpo-seed2" / "eval" / "dpo.jsonl.setting.json", decoder=other)
    pairs = json.loads((copy / "dpo-seed1" / "pairs_summary.json").read_text())
    edit(copy / "dpo-seed1" / "pairs_summary.json", rollouts_decoders={**pairs["rollouts_decoders"], other: 1})
    assert report.main([str(copy), "--out", str(tmp_path / "results")]) == 0
    warnings = json.loads((tmp_path / "results" / "summary.json").read_text())["warnings"]
    assert any("different rollouts" in w and "sft-seed1: 000000000000" in w for w in warnings), warnings
    assert any("answers on 'eval' come from different decoders" in w and f"{other}: dpo-seed2 eval/dpo.jsonl" in w
               for w in warnings), warnings
    assert any("sampled by 2 decoders" in w for w in warnings), warnings
    assert not any("CPU kinds" in w for w in warnings), warnings
    # a seed trained on another CPU kind (another model in fp32) is named, not pooled silently
    stage = copy / "dpo-seed2" / "stages" / "train.json"
    edit(stage, provenance={**json.loads(stage.read_text())["provenance"], "cpu_flags": "avx512f another kind"})
    assert report.main([str(copy), "--out", str(tmp_path / "results")]) == 0
    warnings = json.loads((tmp_path / "results" / "summary.json").read_text())["warnings"]
    assert any(w.startswith("dpo's seeds were trained on different CPU kinds") and "seed 2 on avx512f another kind" in w
               for w in warnings), warnings
    assert "Notes:\n- " in (tmp_path / "results" / "table.md").read_text()
    edit(copy / "sft-seed1" / "pairs_summary.json", rollouts_sha256=None)  # a run from before the field
    assert report.main([str(copy), "--out", str(tmp_path / "results")]) == 0
    warnings = json.loads((tmp_path / "results" / "summary.json").read_text())["warnings"]
    assert any("do not record which rollouts" in w and w.endswith("sft-seed1") for w in warnings), warnings


def test_v2_results_are_runs_the_report_reads_again(v2_runs, tmp_path):
    """The committed copy of each run (report.keep_run) is itself a run: the report over the copies
    gives the same figures as over the originals (what a new machine's driver starts from); the final
    models' copies hold their adapter."""
    from jaxdebate.coherence import report

    root, runs = v2_runs
    first = json.loads((root / "results" / "summary.json").read_text())
    assert report.main([str(root / "results" / "runs"), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())

    def figures(summary):
        return {name: {seed: (run["eval"], run["train"], run["pairs"], run["provenance"], run["decoders"])
                       for seed, run in v["seeds"].items()} for name, v in summary["variants"].items()}

    assert figures(again) == figures(first) and again["base"] == first["base"]
    assert again["mcnemar_p_holm"] == first["mcnemar_p_holm"] and again["selection"] == first["selection"]
    # the final models (the selected variant, here dpo, and sft) keep their adapter, byte for byte
    assert report.final_variants(first) == {"dpo", "sft"}
    for run in ("dpo-seed1", "dpo-seed2", "sft-seed1"):
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            kept = root / "results" / "runs" / run / "adapter" / name
            assert kept.read_bytes() == (runs / run / "adapter" / name).read_bytes()
    report.keep_run(runs / "dpo-seed1", tmp_path / "bare")  # any other run: no weights
    assert (tmp_path / "bare" / "eval" / "comparison.jsonl").is_file() and not (tmp_path / "bare" / "adapter").exists()


def _driver(tmp_path, monkeypatch):
    """scripts/coherence_v2.py as a module, its paths moved under ``tmp_path``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coherence_v2_driver", ROOT / "scripts" / "coherence_v2.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    monkeypatch.setattr(driver, "ROOT", tmp_path)
    monkeypatch.setattr(driver, "ROLLOUTS", tmp_path / "runs" / "rollouts.jsonl")
    monkeypatch.setattr(driver, "ARCHIVE", tmp_path / "results" / "rollouts.jsonl.gz")
    return driver


def test_v2_driver_keeps_the_rollouts_in_git_and_restores_them(tmp_path, monkeypatch):
    """scripts/coherence_v2.py: the shared rollouts' complete lines go to the committed archive (the
    same bytes for the same rollouts), a checkout without them (or with a shorter prefix) gets them
    back, and another collection never replaces the archive."""
    import gzip

    from jaxdebate.errors import DataError

    driver = _driver(tmp_path, monkeypatch)
    rollouts, archive = driver.ROLLOUTS, driver.ARCHIVE
    driver.save_rollouts()  # nothing collected yet: nothing written
    assert not archive.exists()
    rollouts.parent.mkdir(parents=True)
    rollouts.write_text('{"id": "q1"}\n{"id": "q2"}\n{"id": "q')  # a collection stopped mid-line
    driver.save_rollouts()
    packed = archive.read_bytes()
    assert gzip.decompress(packed) == b'{"id": "q1"}\n{"id": "q2"}\n'
    archive.unlink()
    driver.save_rollouts()
    assert archive.read_bytes() == packed  # written again: the same bytes (no timestamp)
    rollouts.unlink()
    driver.restore_rollouts()
    assert jsonl.read_records(rollouts) == [{"id": "q1"}, {"id": "q2"}]
    rollouts.write_text('{"id": "q1"}\n')  # a shorter prefix (an older partial collection): restored
    driver.restore_rollouts()
    assert rollouts.read_text() == '{"id": "q1"}\n{"id": "q2"}\n'
    rollouts.write_text('{"id": "q1"}\n{"id": "q2"}\n{"id": "q3"}\n')  # a collection under way: kept, saved
    driver.restore_rollouts()
    assert rollouts.read_text().count("\n") == 3
    driver.save_rollouts()
    assert gzip.decompress(archive.read_bytes()).count(b"\n") == 3
    rollouts.write_text('{"id": "other"}\n')  # another collection: refused both ways, the archive stays
    kept = archive.read_bytes()
    with pytest.raises(DataError, match="another collection"):
        driver.restore_rollouts()
    with pytest.raises(DataError, match="another collection"):
        driver.save_rollouts()
    assert archive.read_bytes() == kept and rollouts.read_text() == '{"id": "other"}\n'


def test_v2_driver_seeds_a_new_machine_from_the_committed_runs(v2_runs, tmp_path, monkeypatch):
    """Runs finished in an earlier session (kept under results/coherence-v2/runs/) are copied where the
    driver looks, so they are skipped and reported, never re-run; base answers are reused only from a
    run whose decoder is this machine's."""
    import shutil

    root, runs = v2_runs
    driver = _driver(tmp_path, monkeypatch)
    monkeypatch.setattr(driver, "RUNS", "runs")
    monkeypatch.setattr(driver, "RESULTS", "results")
    shutil.copytree(root / "results" / "runs", tmp_path / "results" / "runs")
    driver.seed_runs()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["dpo-seed1", "dpo-seed2", "sft-seed1"]
    assert (tmp_path / "runs" / "dpo-seed1" / "eval" / "summary.json").is_file()
    # base answers: from a finished run with the same decoder only
    shutil.copyfile(runs / "dpo-seed1" / "eval" / "base.jsonl", tmp_path / "runs" / "dpo-seed1" / "eval" / "base.jsonl")
    made_by = json.loads((runs / "dpo-seed1" / "eval" / "base.jsonl.setting.json").read_text())["decoder"]
    driver.seed_base_rows(tmp_path / "runs" / "new-seed1", "eval", "jax float32 on cpu, CPU another kind")
    assert not (tmp_path / "runs" / "new-seed1" / "eval" / "base.jsonl").exists()
    driver.seed_base_rows(tmp_path / "runs" / "new-seed1", "eval", made_by)
    assert (tmp_path / "runs" / "new-seed1" / "eval" / "base.jsonl").read_bytes() == (
        runs / "dpo-seed1" / "eval" / "base.jsonl").read_bytes()


def test_v2_driver_remakes_a_kept_run_without_its_adapter_for_a_second_evaluation(v2_runs, tmp_path, monkeypatch,
                                                                                 capsys):
    """--platinum on a run kept without its adapter (kept before adapters were): the driver sets the kept
    run aside, re-makes it from its config and seed, records whether the adapter is the kept run's
    (here the same bytes: training is deterministic on one machine) and evaluates the second set."""
    from jaxdebate.coherence import report

    root, runs = v2_runs
    driver = _driver(tmp_path, monkeypatch)
    monkeypatch.setattr(driver, "RUNS", "runs")
    monkeypatch.setattr(driver, "RESULTS", "results")
    monkeypatch.setattr(driver, "CONFIG", str(ROOT / "configs" / "coherence_v2_smoke.py"))
    # the fixture's settings, as the driver's overrides of the dpo variant; eval.jsonl as it ran it
    common = [f"model.source={root / 'model'}", f"collect.rollouts={root / 'rollouts.jsonl'}",
              f"data.train={root / 'train.jsonl'}", f"data.eval={root / 'eval.jsonl'}"]
    monkeypatch.setattr(driver, "VARIANTS", {"dpo": common})
    monkeypatch.setattr(driver, "PLATINUM", {"jax": [f"data.eval={root / 'eval2.jsonl'}", "eval.dir=eval_platinum"]})
    report.keep_run(runs / "dpo-seed1", tmp_path / "runs" / "dpo-seed1")  # no adapter

    assert driver.run_all(["dpo"], [1], platinum="jax", deadline=None) == []
    out = capsys.readouterr().out
    remade = tmp_path / "runs" / "dpo-seed1"
    record = json.loads((remade / "remade.json").read_text())
    assert record["same_adapter"] and record["answers_differing"] == 0, record
    assert record["kept_accuracy"] == record["remade_accuracy"] and record["kept_cpu_flags"] == record["remade_cpu_flags"]
    assert "dpo-seed1 re-made: the same adapter, byte for byte; 0 of 3 evaluation answers differ" in out
    assert (remade / "adapter" / "adapter_model.safetensors").read_bytes() == (
        runs / "dpo-seed1" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert json.loads((remade / "eval_platinum" / "summary.json").read_text())["questions"] == 2
    # the set-aside copy is outside the runs the report reads; the report's copy holds the record
    assert (tmp_path / "runs_set_aside" / "dpo-seed1" / "eval" / "summary.json").is_file()
    assert (tmp_path / "results" / "runs" / "dpo-seed1" / "remade.json").is_file()
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert list(summary["variants"]["dpo"]["seeds"]) == ["1"] and summary["unfinished"] == []
    assert summary["variants"]["dpo"]["seeds"]["1"]["remade"] == record
    assert "dpo seed 1 was re-made from its config and seed (remade.json): the same adapter, byte for byte" in (
        tmp_path / "results" / "table.md").read_text()


def test_v2_driver_begins_no_run_that_would_end_past_the_deadline(v2_runs, tmp_path, monkeypatch, capsys):
    """--deadline: a run's expected time is its variant's finished runs' stage seconds (mean over
    seeds), else the longest finished run's; a run that would end past the deadline is not begun."""
    import time

    root, runs = v2_runs
    driver = _driver(tmp_path, monkeypatch)
    monkeypatch.setattr(driver, "ROOT", root)
    monkeypatch.setattr(driver, "RUNS", "runs")

    def took(run, *stages):
        return sum(json.loads((runs / run / "stages" / f"{s}.json").read_text())["seconds"] for s in stages)

    both = ("train", "eval")
    dpo = (took("dpo-seed1", *both) + took("dpo-seed2", *both)) / 2
    assert driver.expected_seconds("dpo", both) == pytest.approx(dpo)
    longest = max(took(r, *both) for r in ("dpo-seed1", "dpo-seed2", "sft-seed1"))
    assert driver.expected_seconds("rpo", both) == pytest.approx(longest)  # no rpo run yet
    # the second evaluation set was written for sft-seed1 only, under its eval.dir's name
    assert driver.expected_seconds("dpo", ("eval_second",)) == pytest.approx(took("sft-seed1", "eval_second"))
    assert driver.expected_seconds("dpo", ("eval_platinum",)) is None

    assert driver.fits("rpo-seed1", both, None)
    assert driver.fits("rpo-seed1", both, time.time() + longest + 60)
    assert not driver.fits("rpo-seed1", both, time.time() + longest - 1)
    assert "rpo-seed1: not begun" in capsys.readouterr().out
    assert driver.fits("new-seed1", ("eval_platinum",), time.time())  # no estimate yet: begun


def test_v2_driver_platinum_sampler_is_recorded_as_its_decoder(tmp_path, monkeypatch):
    """--platinum-sampler vllm evaluates through the vLLM server pinned to fp32, a decoder of its own,
    so base answers the JAX sampler wrote are not reused for it (seed_base_rows compares decoders)."""
    driver = _driver(tmp_path, monkeypatch)
    monkeypatch.setattr(driver, "ROOT", ROOT)  # the real configs/coherence_v2.py
    jax = driver.this_decoder(driver.PLATINUM["jax"])
    assert jax.startswith("jax float32 on cpu") and jax == driver.this_decoder()
    if not (ROOT / ".venv-vllm" / "bin" / "python").is_file():
        pytest.skip("no .venv-vllm (scripts/install_vllm.sh): the vLLM decoder cannot be named")
    vllm = driver.this_decoder(driver.PLATINUM["vllm"])
    assert vllm.startswith("vllm float32 on a local CPU server") and vllm != jax


def test_a_rollouts_file_is_held_to_the_setting_it_was_collected_with(smoke_run, tmp_path, capsys):
    """Collect refuses to extend (and pairs to read) rollouts of another model, data, arms, format,
    scores or sampling, before anything is written; pairs uses only this config's questions; a file
    from before setting files is adopted once, saying so; a directory as collect.rollouts and an
    unknown eval dataset are refused before the first stage."""
    import shutil

    from jaxdebate.coherence.pipeline import collect_setting
    from jaxdebate.configlib import load_config

    run, args = smoke_run
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    moved = list(args)
    moved[moved.index("--workdir") + 1] = str(copy)
    sets = [v for k, v in zip(args, args[1:]) if k == "--set"]
    side = copy / "rollouts.jsonl.setting.json"
    assert json.loads(side.read_text()) == json.loads(json.dumps(
        collect_setting(load_config(ROOT / "configs" / "coherence_smoke.py", sets))))
    rollouts, config = (copy / "rollouts.jsonl").read_bytes(), (copy / "config.json").read_bytes()
    capsys.readouterr()

    assert main(["collect", *moved, "--set", "sampler.max_new_tokens=9"]) == 2
    assert "rollouts.jsonl holds rollouts of another setting (max_tokens differ" in capsys.readouterr().err
    assert main(["pairs", *moved, "--set", "scores.conciseness_weight=0.5"]) == 2
    assert "(scores differ" in capsys.readouterr().err
    assert (copy / "rollouts.jsonl").read_bytes() == rollouts and (copy / "config.json").read_bytes() == config

    assert main(["pairs", *moved, "--set", "data.n_questions=2"]) == 0
    assert "2 of 4 records in" in capsys.readouterr().out
    assert json.loads((copy / "pairs_summary.json").read_text())["questions"] == 2

    side.unlink()
    assert main(["collect", *moved]) == 0
    assert "predates setting files; recorded this config's setting as its own" in capsys.readouterr().out
    assert side.is_file() and (copy / "rollouts.jsonl").read_bytes() == rollouts

    config = (copy / "config.json").read_bytes()
    assert main(["collect", *moved, "--set", f"collect.rollouts={tmp_path}"]) == 2
    assert "is a directory: name the JSONL file" in capsys.readouterr().err
    assert main(["all", *moved, "--set", "data.eval=nosuchset"]) == 2
    assert "unknown dataset 'nosuchset'" in capsys.readouterr().err
    assert (copy / "rollouts.jsonl").read_bytes() == rollouts and (copy / "config.json").read_bytes() == config
