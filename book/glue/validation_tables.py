"""The planner against published measurements as plain-text tables: the published A100 runs as
run, the same runs at three micro-batch choices, the H200 validation set, and the modern rows of
experiments 1-3 with the post-hoc column (the appendix's Markdown tables).

The book's glue, not the library's: :mod:`minipar.cost.validation.published` returns rows and
numbers; the chapter's notebook prints these tables (``sys.path.insert(0, "../book/glue")``),
and ``python book/glue/validation_tables.py`` prints them all.
"""

from __future__ import annotations

import statistics

from minipar.cost.validation import experiment3, fair, modern
from minipar.cost.validation.published import (
    MICRO_BATCH_MODES,
    H200Row,
    Row,
    h200_runs,
    published_runs,
    split_check,
    table1_summary,
    wave_quantisation_evidence,
)


def table(rows: list[Row] | None = None) -> str:
    """The published-run table as plain text (one line per row), layouts in the course's
    (d, t, p) order (book/notation.md), with the micro-batch b and chunks v used."""
    rows = published_runs() if rows is None else rows
    lines = [
        f"{'run':<16} {'d,t,p':>10} {'b':>3} {'v':>2} {'GPUs':>5} {'B':>5} {'pub s':>7} "
        f"{'pred s':>7} {'pub TF':>6} {'pred TF':>7} {'err':>6}"
    ]
    for r in rows:
        t, p, d = r.layout  # stored as published: (t, p, d)
        lines.append(
            f"{r.name:<16} {f'{d},{t},{p}':>10} {r.micro_batch:>3} {r.chunks:>2} "
            f"{r.gpus:>5} {r.batch:>5} "
            f"{r.published_step:>7.2f} {r.predicted_step:>7.2f} "
            f"{r.published_tflops:>6.1f} {r.predicted_tflops:>7.1f} {r.error:>+5.1f}%"
        )
    return "\n".join(lines)


def table_modes() -> str:
    """Table 1 (and the other published runs) under each micro-batch choice, side by side:
    b and the step-time error in % for as run, b = 1 and the planner's b."""
    modes = {m: published_runs(m) for m in MICRO_BATCH_MODES}
    lines = [
        f"{'run':<16} {'d,t,p':>10} {'v':>2} {'pub s':>7} "
        + " ".join(f"{'b':>3} {'err(' + m + ')':>13}" for m in MICRO_BATCH_MODES)
    ]
    for i, r in enumerate(modes["as run"]):
        t, p, d = r.layout
        lines.append(
            f"{r.name:<16} {f'{d},{t},{p}':>10} {r.chunks:>2} {r.published_step:>7.2f} "
            + " ".join(
                f"{modes[m][i].micro_batch:>3} {modes[m][i].error:>+12.1f}%"
                for m in MICRO_BATCH_MODES
            )
        )
    for m in MICRO_BATCH_MODES:
        s = table1_summary(m)
        lines.append(
            f"Table 1, b {m}: {s['within10']}/10 within ±10 %, largest |error| "
            f"{s['worst']:.1f} %, rank agreement {s['spearman']:.2f}"
        )
    s = table1_summary("1", interleaved=False)
    lines.append(
        f"Table 1, b 1 and v 1: {s['within10']}/10 "
        f"within ±10 %, largest |error| {s['worst']:.1f} %, rank agreement {s['spearman']:.2f}"
    )
    cases = (
        ("planner", None, None, "both", "η and bytes per score fitted"),
        ("as run", None, None, "both", "η and bytes per score fitted"),
        ("planner", "waves", 20, "eta", "the 2021 model (tile rule, 20 B/score), η alone fitted"),
    )
    for m, rule, sb, fit, what in cases:
        x = split_check(m, rule, sb, fit=fit)
        lines.append(
            f"{what} on every other Table 1 row at b {m}: η = {x['eta']:.3f}, "
            f"{x['score_bytes']:.0f} B/score; held-out rows "
            + ", ".join(f"{r.name[6:]} {r.error:+.1f}%" for r in x["held_out"])
            + f"; all ten: {x['within10']}/10 within ±10 %, rank agreement {x['spearman']:.2f}"
        )
    return "\n".join(lines)


def h200_table(rows: list[H200Row] | None = None) -> str:
    """The H200 validation table as plain text: step time and peak memory, measured against
    predicted, errors in %."""
    rows = h200_runs() if rows is None else rows
    lines = [
        f"{'run':<16} {'attention':<9} {'b':>2} {'m':>2} {'meas s':>7} {'pred s':>7} "
        f"{'err':>7} {'meas GiB':>8} {'pred GiB':>8} {'err':>7}"
    ]
    for r in rows:
        pred = "refused" if r.predicted_step is None else f"{r.predicted_step:.3f}"
        terr = "" if r.predicted_step is None else f"{r.time_error:+.1f}%"
        lines.append(
            f"{r.name:<16} {r.attention:<9} {r.micro_batch:>2} {r.microbatches:>2} "
            f"{r.measured_step:>7.3f} {pred:>7} {terr:>7} {r.measured_gib:>8.1f} "
            f"{r.predicted_gib:>8.1f} {r.memory_error:>+6.1f}%"
        )
    return "\n".join(lines)


def _markdown(columns: str, align: str, rows) -> str:
    """A Markdown table: ``columns`` and each of ``rows`` are cells separated by `` | ``,
    ``align`` a letter per column (``l`` or ``r``)."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return "\n".join([f"| {columns} |", rule] + [f"| {r} |" for r in rows])


def experiment_1_table(s: dict | None = None) -> str:
    """Experiment 1's validation rows as evaluated after its freeze (the record), as
    ``book/three_d_appendix.md`` prints them."""
    s = modern.as_evaluated(1) if s is None else s
    return _markdown(
        "row | model | GPUs | precision | recomputation | measured s | predicted s | error "
        "| 40 % MFU",
        "llrllrrrr",
        (
            f"`{r['id']}` | {r['model']} | {r['gpus']} | {r['precision']} | {r['recompute']} "
            f"| {r['measured_s']:.2f} | {r['predicted_s']:.2f} | {r['error']:+.0f} % "
            f"| {r['baseline_error']:+.0f} %"
            for r in s["rows"]
        ),
    )


def experiment_2_table(s: dict | None = None) -> str:
    """Experiment 2's rows as evaluated after its freeze (the record), as
    ``book/three_d_appendix.md`` prints them."""
    s = modern.as_evaluated(2) if s is None else s
    by_id = {r["id"]: r for r in modern.load()["rows"]}
    options = {r["id"]: modern.options_for(by_id[r["id"]]) for r in s["rows"]}
    return _markdown(
        "row | model | GPUs | precision | FP8 scaling | TP overlap | recomputation | measured s "
        "| predicted s | error | 40 % MFU",
        "llrllllrrrr",
        (
            f"`{r['id']}` | {r['model']} | {r['gpus']} | {r['precision']} "
            f"| {options[r['id']].fp8 or '-'} | {'yes' if options[r['id']].tp_overlap else 'no'} "
            f"| {r['recompute']} | {r['measured_s']:.2f} | {r['predicted_s']:.2f} "
            f"| {r['error']:+.0f} % | {r['baseline_error']:+.0f} %"
            for r in s["rows"]
        ),
    )


def post_hoc_table(p: dict | None = None) -> str:
    """The appendix's post-hoc column: experiment 1's NVIDIA rows with TP, again with
    tp_overlap (seen rows: never counted)."""
    p = modern.as_evaluated(2)["post_hoc"] if p is None else p
    return _markdown(
        "row (seen in experiment 1) | model | GPUs | measured s | experiment 1 s | error "
        "| post hoc, tp_overlap s | error",
        "llrrrrrr",
        (
            f"`{r['id']}` | {r['model']} | {r['gpus']} | {r['measured_s']:.2f} "
            f"| {r['predicted_s']:.2f} | {r['error']:+.0f} % | {r['post_hoc_s']:.2f} "
            f"| {r['post_hoc_error']:+.0f} %"
            for r in p["rows"]
        ),
    )


def experiment_3_table(s: dict | None = None) -> str:
    """Experiment 3's rows as ``book/three_d_appendix.md`` prints them: the layout as
    (t, p, c, v, d; b), the recomputation and TP overlap priced, the published and predicted
    step time, the model's error and the constant-MFU baseline's."""
    s = experiment3.as_evaluated() if s is None else s
    return _markdown(
        "row | model | GPUs | precision | t, p, c, v, d; b | recomputation | TP overlap "
        "| published s | predicted s | error | 40 % MFU",
        "llrllllrrrr",
        (
            f"`{r['id']}` | {r['model']} | {r['gpus']} | {r['precision']} "
            "| {}, {}, {}, {}, {}; {} ".format(*r["layout"])
            + f"| {r['recompute']} | {'yes' if r['tp_overlap'] else 'no'} "
            f"| {r['measured_s']:.2f} | {r['predicted_s']:.2f} | {r['error']:+.0f} % "
            f"| {r['baseline_error']:+.0f} %"
            for r in s["rows"]
        ),
    )


def experiment_3_score(s: dict | None = None) -> str:
    """Experiment 3's counts within the band, as the appendix states them."""
    s = experiment3.as_evaluated() if s is None else s
    return (
        f"{s['within']} of the {s['n']} rows of experiment 3 are within ±{s['band']:.0f} % of "
        f"their published step time, the constant-MFU baseline {s['baseline_within']}"
    )


def preset_errors() -> list[dict]:
    """Each H100 preset's step-time errors per experiment (the error to expect of a plan on it):
    rows, median |error|, rows within ±15 %, the smallest and largest signed error; beside them
    the constant-MFU baseline fitted on the calibration rows (:mod:`minipar.cost.validation.fair`):
    its median |error| and rows within."""
    runs = {1: modern.as_evaluated(1)["rows"], 2: modern.as_evaluated(2)["rows"]}
    runs[3] = [e | {"gpu": "H100-SXM"} for e in experiment3.as_evaluated()["rows"]]  # DGX-H100
    base = {}
    for exp in runs:
        s = fair.score(str(exp))
        base |= {e["id"]: x for e, x in zip(fair.rows(str(exp)), s["baseline_errors"], strict=True)}
    out = []
    for gpu in ("H100-SXM", "H100-HBM2e-500W"):
        for exp, rows in runs.items():
            errors = sorted(e["error"] for e in rows if e["gpu"] == gpu)
            if errors:
                median = statistics.median(abs(x) for x in errors)
                within = sum(abs(x) <= 15 for x in errors)
                b = [base[e["id"]] for e in rows if e["gpu"] == gpu]
                out.append(
                    dict(gpu=gpu, exp=exp, n=len(errors), median=median, within=within)
                    | dict(lo=errors[0], hi=errors[-1])
                    | dict(base_median=statistics.median(abs(x) for x in b))
                    | dict(base_within=sum(abs(x) <= 15 for x in b))
                )
    return out


def preset_error_table(rows: list[dict] | None = None) -> str:
    """:func:`preset_errors` as ``book/three_d_appendix.md`` prints it."""
    return _markdown(
        "preset | experiment | rows | median error | within ±15 % | range | baseline median "
        "| baseline within",
        "lrrrrlrr",
        (
            f"`{r['gpu']}` | {r['exp']} | {r['n']} | {r['median']:.1f} % | {r['within']} "
            f"| {r['lo']:+.0f} … {r['hi']:+.0f} % | {r['base_median']:.1f} % "
            f"| {r['base_within']}"
            for r in (preset_errors() if rows is None else rows)
        ),
    )


def calibration_3_table(c: dict | None = None) -> str:
    """Experiment 3's rows as the calibration set of FP8 as it runs, TP overlap at its cost and
    the recipes' memory settings (:func:`minipar.cost.validation.experiment3.calibration_3`):
    the recorded error and predicted memory (freeze ``5364c6d``) beside today's, "no" where the
    predicted peak does not fit; rows read after the record show "-" before."""
    c = experiment3.calibration_3() if c is None else c

    def gib(x, fits) -> str:
        return "-" if x is None else f"{x:.1f}" + ("" if fits else " (no)")

    def err(x) -> str:
        return "-" if x is None else f"{x:+.1f} %"

    return _markdown(
        "row | precision | GPUs | recorded error | error now | recorded GiB | GiB now",
        "llrrrrr",
        (
            f"`{r['id']}` | {r['precision']} | {r['gpus']} | {err(r['before_error'])} "
            f"| {err(r['error'])} | {gib(r['before_gib'], r['before_fits'])} "
            f"| {gib(r['predicted_gib'], r['fits'])}"
            for r in c["rows"]
        ),
    )


def calibration_3_score(c: dict | None = None) -> str:
    """The calibration counts as the appendix states them."""
    c = experiment3.calibration_3() if c is None else c
    return (
        f"Of the {c['n']} recorded rows, {c['within_before']} were within ±{c['band']:.0f} % and "
        f"{c['not_fit_before']} did not fit; now {c['within_after']} are within and "
        f"{c['not_fit_after']} do not fit (all {c['n_all']} rows: {c['within_all']} within, "
        f"{c['not_fit_all']} refused)"
    )


def main() -> None:
    print("Published runs (A100), as run: b and v from the authors' scripts where published\n")
    print(table())
    print("\nThe same runs at three micro-batch choices (step-time error, %)\n")
    print(table_modes())
    ev = wave_quantisation_evidence()
    print(
        f"\nGEMM tile quantisation, H200 calibration GEMMs with model q < 0.8 (n = {ev['n']}): "
        f"model q {ev['q']:.2f}, measured {ev['measured']:.2f} of the ceiling"
    )
    print("\nMeasured on one H200 (validation set; constants from the calibration set)\n")
    print(h200_table())
    print("\nExperiment 1: modern published rows, after the first freeze (step time)\n")
    print(experiment_1_table())
    print("\nExperiment 2: async TP and FP8 rowwise rows, after the second freeze\n")
    print(experiment_2_table())
    print("\nExperiment 1's NVIDIA rows with TP, again with tp_overlap (post hoc, not counted)\n")
    print(post_hoc_table())
    print("\nExperiment 3: NVIDIA's H100 rows, after the freeze (step time)\n")
    s = experiment3.as_evaluated()
    print(experiment_3_table(s))
    print(experiment_3_score(s) + ".")
    print("\nExperiment 3 as the calibration set: recorded and today's error and memory\n")
    c = experiment3.calibration_3()
    print(calibration_3_table(c))
    print(calibration_3_score(c) + ".")
    print("\nThe H100 presets' step-time error per experiment, as evaluated\n")
    print(preset_error_table())


if __name__ == "__main__":
    main()
