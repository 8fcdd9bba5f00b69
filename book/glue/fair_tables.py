"""The appendix's fair-baseline and ranking tables as Markdown: every modern validation score
beside its constant-MFU baseline fitted on calibration rows and counted by independent layout
(:mod:`minipar.cost.validation.fair`), and the planner's first choice against each published
layout (:mod:`minipar.cost.validation.regret`).

The book's glue, not the library's; ``python book/glue/fair_tables.py`` prints them all.
"""

from __future__ import annotations

from minipar.cost.validation import fair, regret

NAMES = {
    "1": "1 (after the first freeze)",
    "2": "2 (after the second freeze)",
    "3": "3 (as evaluated)",
    "3+": "3 and the ten GPT-3 175B rows",
    "4": "4 (after the third freeze)",
}


def _markdown(columns: str, align: str, rows) -> str:
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return "\n".join([f"| {columns} |", rule] + [f"| {r} |" for r in rows])


def _mfu(m: dict) -> str:
    return " / ".join(f"{100 * m[k]:.0f}" if k in m else "-" for k in ("bf16", "fp8")) + " %"


def fair_score_table(scores: list[dict] | None = None) -> str:
    """One line per experiment: rows and independent layouts within ±15 % and the median
    |error|, for the model, the baseline fitted on calibration rows (its BF16 / FP8 MFU) and,
    apart, the constant MFU fitted on the scored rows themselves."""
    scores = fair.scores() if scores is None else scores
    return _markdown(
        "experiment | rows within | layouts within | median error | baseline MFU (BF16 / FP8) "
        "| baseline rows | baseline layouts | baseline median | in-sample MFU | in-sample rows "
        "| in-sample layouts | in-sample median",
        "lrrrrrrrrrrr",
        (
            f"{NAMES[s['experiment']]} | {s['within']} of {s['n']} "
            f"| {s['layouts_within']} of {s['layouts']} | {s['median']:.1f} % "
            f"| {_mfu(s['baseline_mfu'])} | {s['baseline_within']} "
            f"| {s['baseline_layouts_within']} | {s['baseline_median']:.1f} % "
            f"| {_mfu(s['in_sample_mfu'])} | {s['in_sample_within']} "
            f"| {s['in_sample_layouts_within']} | {s['in_sample_median']:.1f} %"
            for s in scores
        ),
    )


def fair_score_sentence(exp: str, s: dict | None = None) -> str:
    """One experiment's score beside its baselines, as the appendix states it."""
    s = fair.score(exp) if s is None else s
    return (
        f"{s['within']} of {s['n']} rows ({s['layouts_within']} of {s['layouts']} independent "
        f"layouts) within ±{s['band']:.0f} %, median absolute error {s['median']:.1f} %; the baseline "
        f"fitted on calibration rows {s['baseline_within']} ({s['baseline_layouts_within']} "
        f"layouts), median {s['baseline_median']:.1f} %; the constant fitted on the rows "
        f"themselves {s['in_sample_within']} ({s['in_sample_layouts_within']} layouts), median "
        f"{s['in_sample_median']:.1f} %"
    )


def a100_sentence(a: dict | None = None) -> str:
    """The A100 table's held-out check beside the constant fitted on its calibration rows."""
    a = fair.a100() if a is None else a
    o = a["others"]
    return (
        f"A constant {a['tflops']:.0f} TFLOP/s per GPU fitted on the same five calibration rows "
        f"puts {a['baseline_within']} of the {a['n']} held-out rows within ±{a['band']:.0f} % "
        f"(median absolute error {a['baseline_median']:.1f} %, the model's {a['median']:.1f} % with "
        f"{a['within']} of {a['n']} within), and misses MT-NLG 530B by "
        f"{o['MT-NLG 530B'][1]:+.0f} % and BLOOM 176B by {o['BLOOM 176B'][1]:+.0f} % (the model: "
        f"{o['MT-NLG 530B'][0]:+.0f} % and {o['BLOOM 176B'][0]:+.0f} %)"
    )


def _layout(x: list) -> str:
    t, p, c, v, d, b, rc, z = x
    return f"{t}, {p}, {c}, {v}, {d}; {b}; {rc}; ZeRO-{z}"


def regret_table(rows: list[dict] | None = None) -> str:
    """Every ranked row: the published layout (t, p, c, v, d; b; recomputation; ZeRO stage)
    and its predicted step, the planner's first choice and its step, how much faster the choice
    is predicted, and, beyond 10 %, the part of the step that makes it so."""
    rows = regret.load() if rows is None else rows
    return _markdown(
        "row | experiment | published layout | s | first choice | s | faster by | what makes it so",
        "lllrlrrl",
        (
            f"`{e['id']}` | {e['experiment']} | {_layout(e['published'])}"
            f"{'' if e['published_fits'] else ' (does not fit)'} | {e['published_s']:.2f} "
            f"| {_layout(e['chosen'])} | {e['chosen_s']:.2f} | {e['regret']:+.1f} % "
            f"| {e['term'] or ''}"
            for e in rows
        ),
    )


def regret_sentence(s: dict | None = None) -> str:
    """The ranking's counts as the appendix states them."""
    s = regret.summary() if s is None else s
    named = ", ".join(f"{k} {n}" for k, n in s["named"].items())
    return (
        f"Of {s['n']} published rows, the planner's first choice is the published layout (same "
        f"t, p, c, v, d and micro-batch) for {s['same_layout']}; it is predicted at most 5 % "
        f"faster for {s['within5']} and at most 10 % faster for {s['within10']}, and more than "
        f"10 % faster for {s['beyond10']} (median {s['median']:.1f} %, at most "
        f"{s['worst']:.1f} %). The part of the step that makes the difference there: {named}"
    )


def experiment_4_table(s: dict) -> str:
    """Experiment 4's kept rows: the layout as (t, p, c, v, d; b), the recomputation priced,
    the published and predicted step, the model's error and the baseline's."""
    return _markdown(
        "row | model | GPU | GPUs | precision | t, p, c, v, d; b | recomputation | published s "
        "| predicted s | error | baseline",
        "lllrlllrrrr",
        (
            f"`{e['id']}` | {e['model']} | {e['gpu']} | {e['gpus']} | {e['precision']} "
            "| {}, {}, {}, {}, {}".format(*e["layout"])
            + f"; {e['micro_batch']} | {e['recompute']} | {e['measured_s']:.2f} "
            f"| {e['predicted_s']:.2f} | {e['error']:+.1f} % | {e['baseline_error']:+.1f} %"
            for e in s["rows"]
        ),
    )


def experiment_4_score(s: dict) -> str:
    """Experiment 4's score against its two targets, as the appendix states it."""
    met = {True: "met", False: "not met"}
    return (
        f"{s['within']} of the {s['n']} rows and {s['layouts_within']} of the {s['layouts']} "
        f"independent layouts ({100 * s['layouts_within_share']:.0f} %; target 80 %, "
        f"{met[s['meets_layouts_target']]}) are within ±{s['band']:.0f} % of their published "
        f"step time; the median absolute error is {s['median']:.1f} % against the baseline's "
        f"{s['baseline_median']:.1f} % (BF16 at {100 * s['baseline_mfu']['bf16']:.0f} % and FP8 "
        f"at {100 * s['baseline_mfu']['fp8']:.0f} % of the peak, fitted on experiment 3's rows), "
        f"a ratio of {s['median_ratio']:.2f} (target at most 0.50, "
        f"{met[s['meets_median_target']]}); the baseline has {s['baseline_within']} rows and "
        f"{s['baseline_layouts_within']} layouts within"
    )


def regret_reading(rows: list[dict] | None = None) -> str:
    """Which way the choice departs where it is more than 10 % faster."""
    rows = regret.load() if rows is None else rows
    big = [e for e in rows if e["regret"] > regret.NAMED_ABOVE]

    def model_parallel(x: list) -> int:  # t·p·c
        return x[0] * x[1] * x[2]

    fewer = sum(model_parallel(e["chosen"]) < model_parallel(e["published"]) for e in big)
    zero3 = sum(e["chosen"][7] == 3 for e in big)
    larger_b = sum(e["chosen"][5] > e["published"][5] for e in big)
    return (
        f"Of those {len(big)} rows, the choice uses fewer model-parallel GPUs (t·p·c) in "
        f"{fewer}, ZeRO-3 in {zero3} and a larger micro-batch in {larger_b}"
    )


def main() -> None:
    print("Every score beside its fair baseline and by independent layout\n")
    print(fair_score_table())
    print("\nThe planner's first choice against the published layout\n")
    print(regret_table())
    print("\n" + regret_sentence() + ".")


if __name__ == "__main__":
    main()
