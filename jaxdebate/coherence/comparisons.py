"""The statistical comparisons of the coherence report (issue 28), each at its unit of replication.

A claim about one run compares its answers with another's on the same items (McNemar, paired by item
id); a claim about a method compares seeds (a t test over seeds, paired by seed where two methods are
compared) and is Holm-corrected over the family of method claims of an evaluation set. With two or
three seeds most of those intervals cross zero: an entry then says ``inconclusive at this power``
instead of letting a point estimate read as a finding.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdebate.errors import DataError
from jaxdebate.stats import holm, holm_entries, one_sample_t, paired_mcnemar

SELECTION_SEED = 1  # the seed whose held-out accuracy picks the variant that gets more seeds
INCONCLUSIVE = "inconclusive at this power"


def seed_test(differences: Sequence[float]) -> dict[str, Any]:
    """The t test over seeds of ``differences`` (one per seed): mean, 95% interval and p. Seeds that
    all give the same difference (accuracies are multiples of 1/n, so two seeds can tie) have no
    spread to estimate the seed-to-seed variance from: no interval and no p then, not a zero-width
    interval with p = 0."""
    test = one_sample_t(differences)
    if test["sd"] == 0:
        return {"mean_difference": test["mean"], "ci95": None, "p": None, "n_seeds": test["n"], "no_spread": True}
    return {"mean_difference": test["mean"], "ci95": test["ci95"], "p": test["p"], "n_seeds": test["n"]}


def item_test(first: Mapping[str, bool], second: Mapping[str, bool], what: str) -> dict[str, Any]:
    """McNemar on the same items under two conditions (``id -> correct``); two runs scored on
    different items are not paired, so that is an error naming ``what``."""
    if set(first) != set(second):
        raise DataError(f"{what}: the two sides were scored on different items "
                        f"({len(set(first) ^ set(second))} ids on one side only)")
    test = paired_mcnemar(first, second)
    return {"n": test["n"], "only_first": test["only_first"], "only_second": test["only_second"], "p": test["p"]}


def with_holm(entries: Sequence[dict[str, Any]]) -> None:
    """Holm-adjust the family ``entries`` (each with ``p``; None is untested) in place: ``p_holm`` and
    a ``verdict`` — ``higher``/``lower`` where the adjusted p < 0.05, else :data:`INCONCLUSIVE`."""
    holm_entries(entries)
    for e in entries:
        significant = e["p_holm"] is not None and e["p_holm"] < 0.05
        e["verdict"] = ("higher" if e["mean_difference"] > 0 else "lower") if significant else INCONCLUSIVE


def heldout_at_export(rec: Mapping[str, Any]) -> float | None:
    """The held-out greedy accuracy of the epoch a run exported (what early stopping chose)."""
    exported = rec["train"].get("exported_epoch")
    row = next((r for r in rec["epochs"] if exported is not None and int(r["epoch"]) == int(exported)), None)
    return None if row is None or row.get("heldout/accuracy") is None else float(row["heldout/accuracy"])


def selection(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The preference variant that gets more seeds: the highest held-out accuracy at its exported
    epoch, at the selection seed, SFT excluded (it is the baseline). Chosen on the held-out
    questions, never on an evaluation set, so its evaluation figures are not selected on (the score
    itself is the best epoch's, so it is optimistic; it only orders the variants)."""
    scored = {r["variant"]: heldout_at_export(r) for r in records
              if r["seed"] == SELECTION_SEED and r["settings"]["objective"] != "sft"}
    scored = {k: v for k, v in scored.items() if v is not None}
    rule = (f"the highest held-out greedy accuracy at the exported epoch, seed {SELECTION_SEED}, SFT excluded; "
            "ties go to the variant named first in alphabetical order; optimistic (the same held-out questions "
            "chose the exported epoch), and a ranking of seed-1 runs, not a test of the methods")
    if not scored:
        return {"variant": None, "rule": rule, "heldout_accuracy": {}}
    best = max(sorted(scored), key=lambda k: scored[k])
    return {"variant": best, "rule": rule, "heldout_accuracy": scored}


def holm_by_set(variants: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per evaluation set, every variant's McNemar p vs the base at the selection seed, Holm-adjusted
    over the variants finished so far (one family per evaluation set)."""
    out: dict[str, dict[str, float]] = {}
    for name in sorted({n for v in variants.values() for n in v["mcnemar_p"]}):
        ps = {label: v["mcnemar_p"][name][str(SELECTION_SEED)] for label, v in variants.items()
              if str(SELECTION_SEED) in v["mcnemar_p"].get(name, {})}
        out[name] = dict(zip(ps, holm(list(ps.values())))) if ps else {}
    return out


def best_vs_sft(records: Sequence[Mapping[str, Any]], best: str | None) -> dict[str, Any]:
    """Per evaluation set, the selected variant against SFT: each seed's McNemar on the same items
    (claims about those two runs) and, over two or more seeds, the t test paired by seed (the claim
    about the methods)."""
    sft = {r["seed"]: r for r in records if r["settings"]["objective"] == "sft"}
    chosen = {r["seed"]: r for r in records if best is not None and r["variant"] == best}
    seeds = sorted(set(sft) & set(chosen))
    out: dict[str, Any] = {"variant": best, "seeds": seeds, "by_set": {}}
    for name in sorted({n for r in chosen.values() for n in r["eval"]}):
        both = [s for s in seeds if name in sft[s]["eval"] and name in chosen[s]["eval"]]
        entry: dict[str, Any] = {"seeds": both, "mcnemar_p": {}, "items": {}}
        for s in both:
            test = item_test(sft[s]["items_tuned"][name], chosen[s]["items_tuned"][name],
                             f"{best} vs sft, seed {s}, {name}")
            entry["mcnemar_p"][str(s)] = test["p"]
            entry["items"][str(s)] = {"n": test["n"], "only_sft": test["only_first"], "only_best": test["only_second"]}
        if len(both) >= 2:
            entry.update(seed_test([chosen[s]["eval"][name]["accuracy"] - sft[s]["eval"][name]["accuracy"]
                                    for s in both]))
        out["by_set"][name] = entry
    return out


def method_family(variants: Mapping[str, Any], vs_sft: Mapping[str, Any]) -> dict[str, list[str]]:
    """Holm over the method-level claims of each evaluation set (every multi-seed variant vs the base,
    and the selected variant vs SFT), written into those entries; returns each family's members."""
    families: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for label, v in variants.items():
        for name, entry in v.get("seed_level", {}).items():
            if "vs_base" in entry:
                families.setdefault(name, []).append((f"{label} - base", entry["vs_base"]))
    for name, entry in vs_sft.get("by_set", {}).items():
        if "mean_difference" in entry:
            families.setdefault(name, []).append((f"{vs_sft['variant']} - sft", entry))
    for members in families.values():
        with_holm([e for _, e in members])
    return {name: [m for m, _ in members] for name, members in sorted(families.items())}


def pairwise(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Post hoc, per evaluation set: every two variants at the selection seed, McNemar on the same
    items, Holm-adjusted over all the pairs of the set. Exploratory: what README sentences comparing
    two runs ("A above B") rest on."""
    runs = sorted((r for r in records if r["seed"] == SELECTION_SEED), key=lambda r: r["variant"])
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({n for r in runs for n in r["eval"]}):
        have = [r for r in runs if name in r["items_tuned"]]
        entries = {}
        for a, b in itertools.combinations(have, 2):
            test = item_test(a["items_tuned"][name], b["items_tuned"][name], f"{a['variant']} vs {b['variant']}, {name}")
            entries[f"{a['variant']} vs {b['variant']}"] = {"n": test["n"], f"only_{a['variant']}": test["only_first"],
                                                            f"only_{b['variant']}": test["only_second"], "p": test["p"]}
        holm_entries(list(entries.values()))
        out[name] = entries
    return out
