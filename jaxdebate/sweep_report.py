"""A sweep's seed-level summary (:mod:`jaxdebate.sweep_stats`) as markdown: ``table.md`` with the
strategy table, the comparisons and what they leave out, labelled interim under a plan until its
blocks are complete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxdebate.sweep_stats import EQUIVALENCE_MARGIN


def format_p(p: float | None) -> str:
    """A p-value as the tables and figures print it ("-" where there was no test)."""
    if p is None:
        return "-"
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ci(ci: Sequence[float] | None, signed: bool = True) -> str:
    if not ci:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"[{f.format(ci[0])}, {f.format(ci[1])}]"


def seed_list(seeds: Sequence[Any]) -> str:
    """Seeds as text, runs of consecutive integers as ranges: ``1000–1009, 1012``."""
    parts: list[list[Any]] = []
    for k in seeds:
        if parts and isinstance(k, int) and isinstance(parts[-1][-1], int) and k == parts[-1][-1] + 1:
            parts[-1].append(k)
        else:
            parts.append([k])
    return ", ".join(f"{p[0]}–{p[-1]}" if len(p) > 2 else ", ".join(map(str, p)) for p in parts)


def format_design(comparison: Mapping[str, Any]) -> list[str]:
    """What the tests leave out and why: incomplete blocks with each missing cell's status, seeds
    without runs, diverged runs counted with their last validation, strategies and seeds outside the plan."""
    lines = []
    incomplete = list(comparison.get("seeds_incomplete") or [])
    if incomplete:
        cells = ", ".join(f"{m['strategy']} {m['seed']} ({m['status']})" for m in comparison.get("missing", [])
                          if m["seed"] in incomplete)
        lines.append(f"Left out of every test, incomplete blocks: seeds {seed_list(incomplete)}"
                     + (f"; not counted: {cells}" if cells else "") + ".")
    if comparison.get("seeds_without_runs"):
        lines.append(f"Seeds without a counted run: {seed_list(comparison['seeds_without_runs'])}.")
    if comparison.get("diverged"):
        lines.append("Stopped by the divergence guard, counted with their last validation: "
                     + ", ".join(f"{r['strategy']} {r['seed']} (step {r['final_step']})" for r in comparison["diverged"])
                     + ".")
    if comparison.get("not_planned"):
        lines.append(f"Not in the plan, not analysed: {', '.join(comparison['not_planned'])}.")
    if comparison.get("seeds_not_planned"):
        lines.append(f"Seeds not in the plan, not analysed (extend the plan first): "
                     f"{seed_list(comparison['seeds_not_planned'])}.")
    return lines + [""] if lines else []


def format_comparison(comparison: dict[str, Any], claims: bool = False) -> str:
    """The comparison as markdown: the blocked ANOVA, the paired differences to the baseline (p and
    Holm's p; with ``claims``, what the pre-registered rule lets one say of each), the learning over
    step 0 and the power line (plus the earlier one-way ANOVA)."""
    p = comparison["anova_permutation_p"]
    lines = [f"Endpoint: `{comparison.get('endpoint', 'final_accuracy')}`. Unit of replication: the seed.", ""]
    b = comparison.get("blocked")
    if b:
        share = {k: (v or 0.0) for k, v in b.get("ss_share", {}).items()}  # None: every cell equal
        dropped = b["seeds_dropped"]
        lines += [f"Blocked by seed (two-way ANOVA, strategy x seed, no replication; seeds "
                  f"{seed_list(b['seeds_used'])}"
                  + (f"; blocks left out, incomplete or not run: {seed_list(dropped)}" if dropped else "")
                  + f"): strategy F({b['strategy_df']}, {b['residual_df']}) = {b['strategy_F']:.2f}, "
                  f"p = {format_p(b['strategy_p'])}; seed F({b['seed_df']}, {b['residual_df']}) = {b['seed_F']:.2f}, "
                  f"p = {format_p(b['seed_p'])}. Share of the sum of squares: strategy {share.get('strategy', 0):.0%}, "
                  f"seed {share.get('seed', 0):.0%}, residual {share.get('residual', 0):.0%}.", ""]
    elif not any(c.get("p") is not None for c in comparison["vs_baseline"] + comparison.get("learning", [])):
        lines += ["Fewer than two seeds per strategy: no seed-level test (the per-run Wilson intervals and "
                  "two-proportion tests in summary.json count items, not seeds).", ""]
    lines += format_design(comparison)
    lines += ["Exploratory, ignoring seeds (permutation one-way ANOVA): "
              + ("n/a" if p is None else f"F = {comparison['anova_f']:.2f}, p = {format_p(p)}")]
    if comparison["vs_baseline"]:
        lines += ["", f"| strategy − {comparison['baseline']} (same seed) | seeds | mean difference | paired 95% CI "
                  f"| simultaneous CI (Bonferroni) | t (df) | p | Holm p | within ±{EQUIVALENCE_MARGIN:.2f} (TOST p) |"
                  + (" claim (the protocol's rule) |" if claims else ""), "|---" * (10 if claims else 9) + "|"]
    for c in comparison["vs_baseline"]:
        diff = "-" if c["mean_difference"] is None else f"{c['mean_difference']:+.3f}"
        t = "-" if c.get("t") is None else f"{c['t']:.2f} ({c['df']})"
        eq = c.get("equivalence")
        eq_cell = "-" if not eq else f"{'yes' if eq['equivalent'] else 'no'} ({format_p(eq['p'])})"
        lines.append(f"| {c['strategy']} | {len(c['seeds'])} | {diff} | {_ci(c['ci95'])} | "
                     f"{_ci(c.get('ci_simultaneous'))} | {t} | {format_p(c.get('p'))} | {format_p(c.get('p_holm'))} | {eq_cell} |"
                     + (f" {c.get('claim') or '-'} |" if claims else ""))
    if comparison.get("max_halfwidth") is not None:
        lines += ["", f"Widest paired 95% half-width against {comparison['baseline']}: "
                  f"{comparison['max_halfwidth']:.3f}."]
    if comparison.get("learning"):
        lines += ["", "| strategy: final − step 0 (same seed) | seeds | initial | final | mean gain | "
                  "paired 95% CI | t (df) | p | Holm p |", "|---|---|---|---|---|---|---|---|---|"]
        for g in comparison["learning"]:
            t = "-" if g.get("t") is None else f"{g['t']:.2f} ({g['df']})"
            lines.append(f"| {g['strategy']} | {len(g['seeds'])} | {_num(g['initial'])} | "
                         f"{_num(g['final'])} | {_num(g['mean_gain'], '{:+.3f}')} | {_ci(g['ci95'])} | "
                         f"{t} | {format_p(g['p'])} | {format_p(g['p_holm'])} |")
    power = comparison.get("power")
    if power:
        needed = ", ".join(f"{v if v is not None else '> 100000'} seeds for a {float(k) * 100:.0f}-point difference"
                           for k, v in power["seeds_needed"].items())
        lines += ["", f"Power (exploratory): the paired differences to {comparison['baseline']} have a pooled SD of "
                  f"{power['paired_sd']:.3f} (df {power['df']}); a paired t test (two-sided alpha 0.05) "
                  f"reaches 80% power with {needed}."]
    for kind, sub in (comparison.get("sensitivity_by_cpu") or {}).items():
        sb = sub.get("blocked")
        diffs = ", ".join(f"{c['strategy']} {c['mean_difference']:+.3f}" for c in sub["vs_baseline"]
                          if c["mean_difference"] is not None)
        lines += ["", f"Sensitivity, blocks on CPU kind `{kind}` only (reported, not claimed): "
                  + (f"strategy p = {format_p(sb['strategy_p'])} over seeds {seed_list(sb['seeds_used'])}; "
                     if sb else "") + f"differences to {comparison['baseline']}: {diffs or '-'}."]
    if comparison.get("sensitivity_excluded_seeds"):
        lines += ["", f"Blocks of mixed or unrecorded CPU kind, in no kind's sensitivity comparison: seeds "
                  f"{seed_list(comparison['sensitivity_excluded_seeds'])}."]
    return "\n".join(lines)


def format_strategy_table(table: Sequence[dict[str, Any]]) -> str:
    """The strategy table as markdown."""
    endpoint = table[0].get("endpoint", "final_accuracy") if table else "final_accuracy"
    label = "final held-out accuracy" if endpoint == "final_accuracy" else f"`{endpoint}`"
    lines = [f"| strategy | seeds | {label} (mean) | SD over seeds | 95% CI over seeds | "
             "gain vs step 0 | step time / run |", "|---|---|---|---|---|---|---|"]
    for t in table:
        wall = "-" if t["train_time_min"] is None else f"{t['train_time_min']:.1f} min"
        lines.append(f"| {t['strategy']} | {t['seeds']} | {_num(t['final_accuracy'])} | {_num(t.get('sd'))} | "
                     f"{_ci(t['ci95'], signed=False)} | {_num(t['gain'], '{:+.3f}')} | {wall} |")
    return "\n".join(lines)


def format_summary(summary: Mapping[str, Any]) -> str:
    """``table.md``: under a plan, how many of its blocks are complete (an interim table is labelled
    descriptive); the strategy table and the comparison on the primary endpoint; then the comparison
    on each other endpoint, labelled secondary or, when the plan does not name it, exploratory. The
    claim each comparison allows is shown once every planned block is complete, never before."""
    parts = []
    blocks, plan = summary.get("blocks"), summary.get("plan") or {}
    if blocks:
        where = f" ({plan['protocol']})" if plan.get("protocol") else ""
        parts.append(f"**Interim: {blocks['complete']} of {blocks['planned']} pre-registered seed blocks complete. "
                     f"Descriptive only: no claim or decision rests on this table{where}.**"
                     if blocks["complete"] < blocks["planned"] else
                     f"All {blocks['planned']} pre-registered seed blocks complete{where}.")
    final = bool(blocks) and blocks["complete"] >= blocks["planned"]
    parts += [format_strategy_table(summary["table"]), format_comparison(summary["comparison"], claims=final)]
    exploratory = set(summary.get("exploratory", []))
    for name, comparison in summary.get("secondary_endpoints", {}).items():
        secondary = name not in exploratory
        label = "Secondary endpoint" if secondary else "Exploratory endpoint"
        parts.append(f"### {label} `{name}`\n\n{format_comparison(comparison, claims=final and secondary)}")
    return "\n\n".join(parts) + "\n"
