"""Results of many finished coherence runs (variants × seeds, issue 28) in one committable directory.

    python -m jaxdebate.coherence.report runs/coherence-v2 --out results/coherence-v2

Each argument is a run directory (``config.json`` + an evaluation) or a directory of them. A run is
named by its variant (``variant`` in its config, else :func:`variant_name` of its settings) and its
seed (``dpo.seed``). Written to ``--out``:

* ``summary.json`` — per evaluation set the base model's figures; per variant its settings and, per
  seed and evaluation set, ``accuracy``, ``ci95`` (Wilson), ``n``, ``format_rate``, strict and
  lenient accuracy and ``mcnemar_p`` against the base on the same items; ``mcnemar_p`` per variant
  (evaluation set → seed → p), also for strict correctness and the answer line; for variants with
  two or more seeds the seed-level mean with its t 95% interval and the difference from the base (t
  test over seeds); the selected variant against SFT (McNemar per seed, t paired by seed); those
  method-level tests Holm-corrected per evaluation set with a verdict (``method_family``); every two
  variants at the selection seed (``pairwise_post_hoc``: McNemar, Holm over the pairs, exploratory);
  per-epoch curves (mean over seeds); the runs that had not finished (``unfinished``);
* ``table.md`` — one row per variant, seed and evaluation set;
* ``epoch_curves.png`` — held-out accuracy, format rate, pair loss and accuracy, and the chosen and
  rejected log-prob displacement per epoch, one line per variant (mean over its seeds);
* ``runs/<variant>-seed<k>/`` — each run in its own layout, less its weights (:func:`keep_run`): a
  run the report reads again, e.g. on another machine; the final models' runs (:func:`final_variants`:
  the selected variant and SFT) keep their LoRA adapter too, so a second evaluation set (GSM8K-Platinum)
  can evaluate them on another machine without training them again.

``warnings`` in ``summary.json`` names runs that should not be compared as they are: base answers that
differ, pairs from different rollouts files (or runs that do not say which), rollouts or evaluation
answers from different decoders (``sampling.factory.decoder``: backend, precision, device, CPU kind).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate import jsonl
from jaxdebate.coherence.comparisons import (SELECTION_SEED, best_vs_sft, holm_by_set, method_family, pairwise,
                                             seed_test, selection)
from jaxdebate.coherence.evaluate import accuracy_summary
from jaxdebate.coherence.results import eval_dirs
from jaxdebate.errors import DataError
from jaxdebate.stats import paired_mcnemar, t_interval

CURVES = (
    ("heldout/accuracy", "held-out greedy accuracy"),
    ("heldout/format_rate", "held-out format rate ('Answer: N' line)"),
    ("heldout_pairs/dpo_loss", "held-out pair DPO loss (every objective)"),
    ("heldout_pairs/accuracy", "held-out pair reward accuracy"),
    ("heldout_pairs/chosen_delta", "held-out log π − log π_ref, chosen"),
    ("heldout_pairs/rejected_delta", "held-out log π − log π_ref, rejected"),
)
# at epoch 0 the policy is the reference: every pair's margin is 0, so "chosen beats rejected" is undefined
UNDEFINED_AT_EPOCH_0 = frozenset({"heldout_pairs/accuracy"})
LINESTYLES = ("-", "--", ":", "-.")  # variants whose curves coincide stay visible
FIGURES = ("accuracy", "ci95", "n", "correct", "format_rate", "strict_accuracy", "lenient_accuracy",
           "truncated_rate")


def variant_name(config: Mapping[str, Any]) -> str:
    """The run's ``variant`` or a name from its settings, e.g. ``dpo-both-canonical-b0.1-e3``."""
    if config.get("variant"):
        return str(config["variant"])
    d, p = config["dpo"], config["pairs"]
    objective = d.get("objective", "dpo")
    name = f"{objective}-{p.get('kind', 'both')}-{p.get('source', 'arms')}-b{d['beta']:g}-e{d['epochs']}"
    if objective == "rpo":
        name += f"-a{d.get('rpo_alpha', 1.0):g}"
    return name + ("-es" if d.get("early_stopping") else "")


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories among ``paths`` and their immediate subdirectories (a run holds config.json)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "config.json").is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(c for c in p.iterdir() if (c / "config.json").is_file())
        else:
            raise DataError(f"{p} is neither a coherence run (no config.json) nor a directory of runs")
    return out


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _side(rows: Sequence[Mapping[str, Any]], side: str) -> dict[str, Any]:
    return {k: v for k, v in accuracy_summary([r[side] for r in rows]).items() if k in FIGURES}


def _paired_flag(rows: Sequence[Mapping[str, Any]], flag: str) -> float | None:
    """McNemar's p of a per-item flag (strict correctness, answer line present), base vs tuned."""
    if not all(flag in r["base"] and flag in r["dpo"] for r in rows):
        return None
    return paired_mcnemar([bool(r["base"][flag]) for r in rows], [bool(r["dpo"][flag]) for r in rows])["p"]


def run_record(workdir: Path) -> dict[str, Any] | None:
    """One run's figures (None when it has no finished evaluation): variant, seed, settings, per
    evaluation set the base and tuned figures with McNemar's p, the epoch log and the pairs."""
    config = json.loads((workdir / "config.json").read_text())
    evals = eval_dirs(workdir)
    if not evals:
        return None
    d, p = config["dpo"], config["pairs"]
    record: dict[str, Any] = {
        "workdir": str(workdir), "variant": variant_name(config), "seed": int(d.get("seed", 0)),
        "settings": {"objective": d.get("objective", "dpo"), "rpo_alpha": d.get("rpo_alpha"), "beta": d["beta"],
                     "epochs": d["epochs"], "early_stopping": d.get("early_stopping", False),
                     "pairs_kind": p.get("kind", "both"), "pairs_source": p.get("source", "arms"),
                     "heldout_fraction": p.get("heldout_fraction", 0.0)},
        "eval": {}, "base": {}, "items": {}, "items_tuned": {},
    }
    for ev in evals:
        rows = jsonl.read_records(ev / "comparison.jsonl")
        summary = json.loads((ev / "summary.json").read_text())
        base = {r["id"]: bool(r["base"]["correct"]) for r in rows}
        tuned = {r["id"]: bool(r["dpo"]["correct"]) for r in rows}
        test = paired_mcnemar(base, tuned)
        record["base"][ev.name] = {**_side(rows, "base"), "dataset": summary.get("dataset")}
        record["eval"][ev.name] = {**_side(rows, "dpo"), "mcnemar_p": test["p"],
                                   "only_base_correct": test["only_first"], "only_tuned_correct": test["only_second"],
                                   # the answer line and strict grading move too (a format change is not
                                   # hidden by lenient parsing): their own paired tests, None for old rows
                                   **{f"mcnemar_p_{key}": _paired_flag(rows, flag) for key, flag in
                                      (("strict", "correct_strict"), ("format", "format_ok"))}}
        record["items"][ev.name] = base
        record["items_tuned"][ev.name] = tuned
    train = _read_json(workdir / "train" / "summary.json") or {}
    record["train"] = {k: train.get(k) for k in ("objective", "epochs_run", "best_epoch", "exported_epoch",
                                                 "stopped_early", "pairs_trained", "heldout_pairs", "updates_run",
                                                 "base_beats_exported")}
    epochs = workdir / "train" / "epochs.jsonl"
    record["epochs"] = jsonl.read_records(epochs) if epochs.is_file() else []
    pairs = _read_json(workdir / "pairs_summary.json") or {}
    record["pairs"] = {k: pairs.get(k) for k in ("questions", "questions_mixed", "questions_mixed_by_source",
                                                 "pool", "pairs", "pairs_by_type", "split", "coherence_gap", "source",
                                                 "kind", "rollouts_sha256", "rollouts_decoders")}
    record["provenance"] = {p.stem: stage["provenance"] for p in sorted((workdir / "stages").glob("*.json"))
                            if "provenance" in (stage := json.loads(p.read_text()))}
    record["decoders"] = {f"{ev.name}/{p.name.removesuffix('.setting.json')}": json.loads(p.read_text()).get("decoder")
                          for ev in evals for p in sorted(ev.glob("*.setting.json"))}
    record["remade"] = _read_json(workdir / "remade.json")  # a kept run re-made by scripts/coherence_v2.py
    return record


def _mixed(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Warnings for runs that should not be compared as they are: pairs from different rollouts (or
    runs that do not record theirs), rollouts sampled by several decoders, evaluation answers from
    different decoders."""
    out = []
    rollouts = {r["workdir"]: r["pairs"].get("rollouts_sha256") for r in records}
    known = {w: h for w, h in rollouts.items() if h}
    if len(set(known.values())) > 1:
        out.append("the runs' pairs come from different rollouts files (pairs_summary rollouts_sha256): "
                   + "; ".join(f"{w}: {h[:12]}" for w, h in sorted(known.items())))
    if known and len(known) < len(rollouts):
        out.append("some runs do not record which rollouts their pairs come from (no rollouts_sha256): "
                   + ", ".join(sorted(w for w, h in rollouts.items() if not h)))
    sampled = {d for r in records for d in (r["pairs"].get("rollouts_decoders") or {})}
    if len(sampled) > 1:
        out.append(f"the rollouts were sampled by {len(sampled)} decoders (pairs_summary rollouts_decoders): "
                   + "; ".join(sorted(sampled)))
    # per evaluation set: its rows compare answers, so one set's answers should share a decoder (two sets
    # may differ, e.g. GSM8K-Platinum decoded on the vLLM server and arithmetic in-process)
    by_set: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for f, d in r.get("decoders", {}).items():
            by_set[f.split("/", 1)[0]][str(d)].append(f"{Path(r['workdir']).name} {f}")
    for name, decoders in sorted(by_set.items()):
        if len(decoders) > 1:
            out.append(f"the evaluations' answers on {name!r} come from different decoders (<eval dir>/*.setting.json): "
                       + "; ".join(f"{d}: {', '.join(sorted(files))}" for d, files in sorted(decoders.items())))
    # fp32 kernels differ between CPU kinds, so one seed trained on two kinds gives two models: a
    # variant whose seeds were trained on different kinds is said to be pooled across them
    by_variant: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cpu = (r.get("provenance", {}).get("train") or {}).get("cpu_flags")
        by_variant[r["variant"]][str(cpu)].append(r["seed"])
    for variant, kinds in sorted(by_variant.items()):
        if len(kinds) > 1:
            out.append(f"{variant}'s seeds were trained on different CPU kinds (stages/train.json cpu_flags), "
                       "pooled here: " + "; ".join(f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, sorted(seeds)))} on {cpu}"
                                                  for cpu, seeds in sorted(kinds.items(), key=lambda k: min(k[1]))))
    return out


def _seed_level(values: Sequence[float], base: float | None) -> dict[str, Any]:
    """Mean over seeds with its t interval (none without spread: see ``comparisons.seed_test``) and,
    against the base's deterministic greedy accuracy, the t test of the per-seed differences."""
    sd = float(np.std(values, ddof=1))
    out = {"n_seeds": len(values), "mean": float(np.mean(values)), "sd": sd,
           "ci95": list(t_interval(values)) if sd > 0 else None}
    if base is not None:
        out["vs_base"] = seed_test([v - base for v in values])
    return out


def _curves(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per curve key: epoch → mean over the runs that logged it (no epoch 0 for a key that is
    undefined there: :data:`UNDEFINED_AT_EPOCH_0`)."""
    out: dict[str, dict[str, float]] = {}
    for key, _ in CURVES:
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for rec in records:
            for row in rec["epochs"]:
                if row.get(key) is not None and not (int(row["epoch"]) == 0 and key in UNDEFINED_AT_EPOCH_0):
                    by_epoch[int(row["epoch"])].append(float(row[key]))
        if by_epoch:
            out[key] = {str(e): float(np.mean(v)) for e, v in sorted(by_epoch.items())}
    return out


# what each figure of summary.json is (written into it as ``tests``, so a reader of the JSON alone knows)
TESTS = {
    "ci95 of a run (variants.*.seeds.*.eval.*, base)": "Wilson 95% interval over the run's items",
    "mcnemar_p": "exact two-sided McNemar (binomial on the discordant items), the run against the base on "
                 "the same items; per evaluation set and seed",
    "mcnemar_p_holm": f"mcnemar_p at seed {SELECTION_SEED}, Holm over the variants finished at that seed, per "
                      "evaluation set",
    "mcnemar_p_strict, mcnemar_p_format": "the same test on strict correctness and on the answer line, not adjusted",
    "seed_level (ci95, vs_base) and best_vs_sft": "t over seeds: one-sample t on the per-seed values or "
                                                   "differences (paired by seed), df = seeds - 1, two-sided; its "
                                                   "intervals are not Holm-adjusted; conditional on these items "
                                                   "(the seeds vary the adapter's initialisation and the pair "
                                                   "order, not the items, the rollouts or the split)",
    "method_family": "Holm over one evaluation set's method-level claims (each multi-seed variant - base, the "
                     "selected variant - sft); verdict higher/lower where p_holm < 0.05, else inconclusive",
    "pairwise_post_hoc": f"exact McNemar between every two variants at seed {SELECTION_SEED} on the same items, Holm "
                         "over the pairs of an evaluation set; exploratory, claims about runs",
}


def build_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``summary.json`` of :func:`export` from :func:`run_record` results."""
    seen: dict[tuple[str, int], str] = {}
    for rec in records:
        key = (rec["variant"], rec["seed"])
        if key in seen:
            raise DataError(f"{rec['workdir']} and {seen[key]} are both variant {key[0]!r} seed {key[1]}: "
                            "give one a different variant (--set variant=...) or dpo.seed")
        seen[key] = rec["workdir"]
    base: dict[str, Any] = {}
    warnings: list[str] = _mixed(records)
    for rec in records:
        for name, figures in rec["base"].items():
            first = base.setdefault(name, {**figures, "items": rec["items"][name], "from": rec["workdir"]})
            if first["items"] != rec["items"][name]:
                warnings.append(f"{rec['workdir']}: the base model's per-item results on {name!r} differ from "
                                f"{first['from']}'s (different items or settings)")
    variants: dict[str, Any] = {}
    for rec in sorted(records, key=lambda r: (r["variant"], r["seed"])):
        v = variants.setdefault(rec["variant"], {"settings": rec["settings"], "seeds": {}, "mcnemar_p": {}})
        v["seeds"][str(rec["seed"])] = {"eval": rec["eval"], "train": rec["train"], "pairs": rec["pairs"],
                                        "workdir": rec["workdir"], "provenance": rec.get("provenance", {}),
                                        "decoders": rec.get("decoders", {}), "remade": rec.get("remade")}
        for name, figures in rec["eval"].items():
            v["mcnemar_p"].setdefault(name, {})[str(rec["seed"])] = figures["mcnemar_p"]
    for label, v in variants.items():
        runs = [r for r in records if r["variant"] == label]
        v["curves"] = _curves(runs)
        if len(runs) < 2:
            continue
        v["seed_level"] = {}
        for name in sorted({n for r in runs for n in r["eval"]}):
            acc = [r["eval"][name]["accuracy"] for r in runs if name in r["eval"]]
            if len(acc) >= 2:
                entry = _seed_level(acc, base.get(name, {}).get("accuracy"))
                rates = [r["eval"][name]["format_rate"] for r in runs
                         if r["eval"].get(name, {}).get("format_rate") is not None]
                entry["format_rate_mean"] = float(np.mean(rates)) if rates else None
                v["seed_level"][name] = entry
    chosen = selection(records)
    vs_sft = best_vs_sft(records, chosen["variant"])
    return {
        "runs": len(records),
        "base": {name: {k: x for k, x in b.items() if k not in ("items", "from")} for name, b in base.items()},
        "variants": variants,
        "mcnemar_p_holm": holm_by_set(variants),
        "selection": chosen,
        "best_vs_sft": vs_sft,
        "method_family": method_family(variants, vs_sft),
        "pairwise_post_hoc": pairwise(records),
        "warnings": warnings,
        "tests": TESTS,
    }


def plot_curves(summary: Mapping[str, Any], path: Path) -> Path | None:
    """``epoch_curves.png``: one panel per :data:`CURVES` key, one line per variant (None without data)."""
    if not any(v["curves"] for v in summary["variants"].values()):
        return None
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    for ax, (key, title) in zip(axes.flat, CURVES):
        for i, (label, v) in enumerate(sorted(summary["variants"].items())):
            curve = v["curves"].get(key)
            if curve:
                epochs = [int(e) for e in curve]
                ax.plot(epochs, list(curve.values()), LINESTYLES[i % len(LINESTYLES)], marker="o",
                        color=f"C{i % 10}", markersize=3, label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch (0 = base)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_table(summary: Mapping[str, Any]) -> str:
    """Markdown: the base per evaluation set, then one row per variant, seed and evaluation set."""

    def acc(f: Mapping[str, Any]) -> str:
        return f"{f['accuracy']:.3f} [{f['ci95'][0]:.3f}, {f['ci95'][1]:.3f}]"

    def rate(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    lines = ["| variant | seed | evaluation set | n | accuracy [95% CI: Wilson for a run, t over seeds for a mean] "
             f"| format rate | strict | lenient | truncated | p vs base: exact McNemar for a run (Holm over the seed-"
             f"{SELECTION_SEED} variants), t over seeds for a mean |", "|---|---|---|---|---|---|---|---|---|---|"]
    adjusted = summary.get("mcnemar_p_holm", {})
    for name, b in summary["base"].items():
        lines.append(f"| base | – | {name} | {b['n']} | {acc(b)} | {rate(b['format_rate'])} | "
                     f"{rate(b['strict_accuracy'])} | {rate(b['lenient_accuracy'])} | "
                     f"{rate(b.get('truncated_rate'))} | – |")
    for label, v in summary["variants"].items():
        for seed, s in v["seeds"].items():
            for name, f in s["eval"].items():
                holm_p = adjusted.get(name, {}).get(label) if seed == str(SELECTION_SEED) else None
                p_text = f"{f['mcnemar_p']:.3g}" + ("" if holm_p is None else f" ({holm_p:.3g})")
                lines.append(f"| {label} | {seed} | {name} | {f['n']} | {acc(f)} | {rate(f['format_rate'])} | "
                             f"{rate(f['strict_accuracy'])} | {rate(f['lenient_accuracy'])} | "
                             f"{rate(f.get('truncated_rate'))} | {p_text} |")
        for name, e in v.get("seed_level", {}).items():
            ci = "(no spread)" if e["ci95"] is None else f"[{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}]"
            p_text = _method_text(e.get("vs_base") or {})
            lines.append(f"| {label} | mean of {e['n_seeds']} | {name} | – | {e['mean']:.3f} {ci} | "
                         f"{rate(e['format_rate_mean'])} | – | – | – | {p_text} |")
    sel = summary.get("selection") or {}
    if sel.get("variant"):
        # the rule runs over the variants finished so far: the choice is final only when all have run
        lines += ["", f"Selected for more seeds, among the {len(sel['heldout_accuracy'])} preference variant(s) "
                  f"finished at seed {SELECTION_SEED} so far: **{sel['variant']}** ({sel['rule']}; held-out accuracy "
                  + ", ".join(f"{k} {v:.3f}" for k, v in sorted(sel["heldout_accuracy"].items())) + ")."]
    for name, e in (summary.get("best_vs_sft") or {}).get("by_set", {}).items():
        if "mean_difference" in e:
            ci = "" if e["ci95"] is None else f" [{e['ci95'][0]:+.3f}, {e['ci95'][1]:+.3f}]"
            lines.append(f"{sel['variant']} − sft on {name}, paired over seeds {e['seeds']}: "
                         f"{e['mean_difference']:+.3f}{ci}, {_method_text(e)}.")
    remade = [(label, seed, s["remade"]) for label, v in summary["variants"].items()
              for seed, s in v["seeds"].items() if s.get("remade")]
    notes = [f"{label} seed {seed} was re-made from its config and seed (remade.json): "
             + ("the same adapter, byte for byte" if r.get("same_adapter") else "another adapter than the kept run's")
             + (f"; accuracy on 'eval' {r['kept_accuracy']:.3f} kept, {r['remade_accuracy']:.3f} re-made"
                if r.get("kept_accuracy") is not None else "")
             + f"; {r.get('answers_differing')} of {r.get('answers')} answers differ; the rows above are the re-made run's"
             for label, seed, r in remade]
    notes += summary.get("warnings", [])
    if notes:
        lines += ["", "Notes:", *(f"- {n}" for n in notes)]
    return "\n".join(lines)


def _method_text(test: Mapping[str, Any]) -> str:
    """A method-level test in a table cell: p over seeds, its Holm value and the verdict."""
    if "mean_difference" not in test:
        return "n/a"
    if test["p"] is None:
        return f"no spread over seeds: untested ({test.get('verdict', '')})"
    holm_p = "" if test.get("p_holm") is None else f", Holm {test['p_holm']:.3g}"
    return f"{test['p']:.3g} (t over seeds{holm_p}): {test.get('verdict', '')}"


def export(paths: Iterable[str | Path], out_dir: str | Path) -> Path:
    """Write the results directory of the module docstring from the finished runs under ``paths``."""
    out = Path(out_dir)
    records, unfinished = [], []
    for run in find_runs(paths):
        rec = run_record(run)
        (records if rec is not None else unfinished).append(rec if rec is not None else str(run))
    if not records:
        raise DataError(f"no finished coherence run (one with an evaluation) under {[str(p) for p in paths]}")
    summary = build_summary(records)
    summary["unfinished"] = unfinished
    out.mkdir(parents=True, exist_ok=True)
    summary["plots"] = [p.name for p in [plot_curves(summary, out / "epoch_curves.png")] if p is not None]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(format_table(summary) + "\n")
    final = final_variants(summary)
    for rec in records:
        src, dst = Path(rec["workdir"]), out / "runs" / f"{rec['variant']}-seed{rec['seed']}"
        if src.resolve() != dst.resolve():
            keep_run(src, dst, adapter=rec["variant"] in final)
    return out


def final_variants(summary: Mapping[str, Any]) -> set[str]:
    """The variants whose models are final (issue 28: the selected preference variant and the SFT
    baseline, each at three seeds): the ones a second evaluation set is run on."""
    return {"sft", *([summary["selection"]["variant"]] if summary.get("selection") else [])}


def keep_run(src: Path, dst: Path, *, adapter: bool = False) -> None:
    """Copy what :func:`run_record` reads of a finished run, in the run's own layout, so the copy is a
    run the report (and ``scripts/coherence_v2.py``, which seeds a new machine's ``runs/`` from it)
    reads like the original: config, pairs summary, stage records (commit, machine), training summary
    and epoch log, and per evaluation set its summary, the side-by-side answers (the transcripts) and
    what made them (``*.setting.json``), and whether it was re-made (``remade.json``). Not the checkpoints
    or pairs (megabytes; a run is re-made from its config, seed and the committed rollouts), nor the
    adapter unless ``adapter`` (a final model's: ~7 MB, cheaper to keep than the ~45 min to re-make)."""
    names = ["config.json", "pairs_summary.json", "remade.json", "train/summary.json", "train/epochs.jsonl",
             *(p.relative_to(src).as_posix() for p in sorted(src.glob("stages/*.json")))]
    if adapter:
        names += [p.relative_to(src).as_posix() for p in sorted(src.glob("adapter/*"))]  # PEFT format
    for ev in eval_dirs(src):
        names += [f"{ev.name}/{p.name}" for p in sorted(ev.iterdir())
                  if p.name in ("summary.json", "comparison.jsonl", "config.json") or p.name.endswith(".setting.json")]
    for name in names:
        if (src / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, dst / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxdebate.coherence.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="coherence run directories, or directories holding them")
    parser.add_argument("--out", required=True, help="where to write the committable results")
    args = parser.parse_args(argv)
    try:
        out = export(args.runs, args.out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print((out / "table.md").read_text(), end="")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
