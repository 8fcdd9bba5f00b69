"""Experiment 5's table and score as ``book/three_d_appendix.md`` prints them: the MoE rows of
:mod:`minipar.cost.validation.experiment5`, as evaluated once after the freeze.

The book's glue, not the library's; ``python book/glue/experiment5_tables.py`` prints them.
"""

from __future__ import annotations

from minipar.cost.validation import experiment5


def _markdown(columns: str, align: str, rows) -> str:
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return "\n".join([f"| {columns} |", rule] + [f"| {r} |" for r in rows])


def _layout(e: dict) -> str:
    """t, p, c, e, v, d; b with the priced v, the published one beside it where they differ."""
    t, p, c, ep, vp, v, d, b = e["layout"]
    chunks = f"{v}" if v == (vp or 1) else f"{v} ({vp})"
    return f"{t}, {p}, {c}, {ep}, {chunks}, {d}; {b}"


def experiment_5_table(s: dict | None = None) -> str:
    """Experiment 5's kept rows: the layout (t, p, c, e, v, d; b; a published vp the planner's
    splits do not allow in parentheses), the recomputation priced, the published and predicted
    step time, the model's error and the baseline's."""
    s = experiment5.as_evaluated() if s is None else s
    return _markdown(
        "row | model | GPU | GPUs | precision | t, p, c, e, v, d; b | recomputation "
        "| published s | predicted s | error | baseline",
        "lllrlllrrrr",
        (
            f"`{e['id']}` | {e['model']} | {e['gpu']} | {e['gpus']} | {e['precision']} "
            f"| {_layout(e)} | {e['recompute']} | {e['measured_s']:.2f} "
            f"| {e['predicted_s']:.2f} | {e['error']:+.1f} % | {e['baseline_error']:+.1f} %"
            for e in s["rows"]
        ),
    )


def experiment_5_score(s: dict | None = None) -> str:
    """Experiment 5's counts, by rows and by independent layout, beside the baseline's."""
    s = experiment5.as_evaluated() if s is None else s
    mfu = s["baseline_mfu"]
    return (
        f"{s['within']} of the {s['n']} rows and {s['layouts_within']} of the {s['layouts']} "
        f"independent layouts are within ±{s['band']:.0f} % of their published step time; the "
        f"median absolute error is {s['median']:.1f} % against the baseline's "
        f"{s['baseline_median']:.1f} % (BF16 at {100 * mfu['bf16']:.0f} % and FP8 at "
        f"{100 * mfu['fp8']:.0f} % of the peak, fitted on experiment 3's rows, none of these), "
        f"which has {s['baseline_within']} rows and {s['baseline_layouts_within']} layouts within"
    )


def main() -> None:
    print(experiment_5_table())
    print("\n" + experiment_5_score() + ".")


if __name__ == "__main__":
    main()
