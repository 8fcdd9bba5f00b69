"""Every modern validation score beside its fair baseline (:mod:`.baseline`), counted by row and
by independent layout.

The scores are the experiments as evaluated once after their freezes (the records:
:func:`minipar.cost.validation.modern.as_evaluated`,
:func:`minipar.cost.validation.experiment3.as_evaluated`). The baseline's two MFUs are fitted on
calibration rows only (:func:`calibration`): for experiments 1 to 3 the three rows that set the
frozen model's constants (:data:`minipar.cost.validation.modern.CALIBRATION`, torchtitan's Llama
3.1 8B on 8 GPUs: two BF16, one FP8); for experiment 4, experiment 3's rows (the 50 of its
evaluation and the ten GPT-3 175B rows of the same source). Beside it, :func:`score` gives the
constant MFU fitted on the scored rows themselves ("in-sample"): not a baseline, since it has
seen the rows, but what a two-number model could score on them, so that a reader sees how much
of a score a constant explains."""

from __future__ import annotations

import functools
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

from ..planner import three_d as planner
from . import baseline, experiment3, modern, published

EXPERIMENTS = ("1", "2", "3", "3+")
"""The scores of the records: experiments 1, 2 and 3, and experiment 3 with the ten GPT-3 175B
rows read after its evaluation (:data:`LATE_175B`), priced by the same frozen model."""

LATE_175B = Path(__file__).resolve().parent / "experiment3_gpt3_175b_as_priced.json"
"""The ten GPT-3 175B rows of ``nemo_megatron/README_175b.md`` (DGX Cloud Benchmarking
v25.02.01, the source of experiment 3's rows), read after experiment 3 was evaluated and priced
by its frozen model and mapping: a record, like experiment 3's."""


@functools.cache
def _published() -> dict[str, tuple[dict, str]]:
    """Every published modern row by id, with the GPU preset it is priced on."""
    out = {r["id"]: (r, modern.gpu_for(r)) for r in modern.load()["rows"]}
    out |= {r["id"]: (r, "H100-SXM") for r in experiment3.load()["rows"]}
    return out


def _seq(row: dict) -> int:
    return row.get("seq_len") or (row.get("config_defaults") or {}).get("seq_len", {}).get("value")


def layout_key(row: dict, gpu: str) -> tuple:
    """The layout per model replica: model, sequence, precision and its scaling, GPU,
    (t, p, c, v, b), sharded or not, async TP and compile; never d, the GPU count, the global
    batch or the container that ran it."""
    mb = row.get("micro_batch") or (row.get("config_defaults") or {}).get("micro_batch", {})
    mb = mb.get("value") if isinstance(mb, dict) else mb
    detail = "rowwise" in str(row.get("precision_detail") or "")
    keys = ("tp", "pp", "cp", "vp", "async_tp", "compile")
    head = (modern._preset(row), _seq(row), row["precision"], detail, gpu, mb)
    return (*head, bool(row.get("fsdp")), *(row.get(k) or 0 for k in keys))


def enrich(e: dict) -> dict:
    """An evaluated (or recorded) row with what :mod:`.baseline` reads: its GPU preset, model
    FLOPs per step (the planner's count at the row's sequence), the measured step, the layout
    key."""
    row, gpu = _published()[e["id"]]
    m = planner.MODELS[modern._preset(row)]
    m = replace(m, seq=_seq(row)) if _seq(row) != m.seq else m
    return e | {
        "gpu": gpu,
        "gpus": row["gpus"],
        "precision": row["precision"],
        "model_flops": planner.model_flops(m, row["global_batch"], "none")[0],
        "measured_s": e.get("measured_s") or measured_seconds(row),
        "layout_key": layout_key(row, gpu),
    }


def measured_seconds(row: dict) -> float:
    """The published step time, else global batch × sequence / (GPUs × tokens/s/GPU)."""
    step = modern._measured(row, "step_seconds")
    if step is not None:
        return step
    tps = modern._measured(row, "tokens_per_s_per_gpu") or row.get("tokens_per_s_per_gpu")
    return row["global_batch"] * _seq(row) / (row["gpus"] * tps)


def late_175b() -> list[dict]:
    """The GPT-3 175B rows as the frozen model of experiment 3 priced them (:data:`LATE_175B`)."""
    return json.loads(LATE_175B.read_text())["rows"]


def rows(exp: str) -> list[dict]:
    """The recorded rows of experiment ``exp`` (:data:`EXPERIMENTS`), enriched."""
    if exp in ("1", "2"):
        done = modern.as_evaluated(int(exp))["rows"]
    elif exp == "3":
        done = experiment3.as_evaluated()["rows"]
    elif exp == "3+":
        done = experiment3.as_evaluated()["rows"] + late_175b()
    else:
        raise ValueError(f"experiment ({exp!r}) must be one of {', '.join(EXPERIMENTS)}")
    return [enrich(e) for e in done]


def calibration(exp: str) -> list[dict]:
    """The rows experiment ``exp``'s baseline is fitted on: the three calibration rows for
    experiments 1 to 3; every kept row of experiment 3's source file (its 50 and the ten GPT-3
    175B rows), with its published step, for experiment 4."""
    if exp in EXPERIMENTS:
        return [enrich(e) for e in modern.as_evaluated(1)["calibration"]]
    if exp == "4":
        return [enrich({"id": r["id"]}) for r in experiment3.kept_rows()]
    raise ValueError(f"experiment ({exp!r}) must be one of {', '.join(EXPERIMENTS)}, 4")


def score(exp: str, scored: list[dict] | None = None, band: float = 15.0) -> dict:
    """:func:`baseline.score` of experiment ``exp`` (or of ``scored``, its enriched rows) with
    the baseline fitted on :func:`calibration`; ``in_sample_*``: the same counts for the constant
    MFU fitted on the scored rows themselves."""
    scored = rows(exp) if scored is None else scored
    s = baseline.score(scored, baseline.fit(calibration(exp)), band)
    own = baseline.score(scored, baseline.fit(scored), band)
    return s | {
        "experiment": exp,
        "in_sample_mfu": own["baseline_mfu"],
        "in_sample_within": own["baseline_within"],
        "in_sample_median": own["baseline_median"],
        "in_sample_layouts_within": own["baseline_layouts_within"],
    }


def scores(band: float = 15.0) -> list[dict]:
    """:func:`score` of every experiment of :data:`EXPERIMENTS`."""
    return [score(exp, band=band) for exp in EXPERIMENTS]


def a100(band: float = 10.0) -> dict:
    """The A100 table's check (:func:`minipar.cost.validation.published.split_check`: η and the
    bytes per attention score fitted on five Table 1 rows, checked on the other five) beside a
    constant TFLOP/s per GPU fitted on the same five calibration rows (their geometric mean, the
    least-squares fit of the log error; every A100 row is BF16/FP16, one precision), and on the
    other published runs (GPT-3 175B's assumed figure, MT-NLG 530B, BLOOM 176B): each model
    error beside the constant's, in % of the published step."""
    s = published.split_check()
    cal, held = s["calibration"], s["held_out"]
    tflops = math.exp(statistics.fmean(math.log(r.published_tflops) for r in cal))

    def base(r) -> float:  # the constant's step over the published step
        return 100 * (r.published_tflops / tflops - 1)

    others = [r for r in published.published_runs() if not r.name.startswith("PTD-P")]
    return {
        "tflops": tflops,
        "n": len(held),
        "within": sum(abs(r.error) <= band for r in held),
        "median": statistics.median(abs(r.error) for r in held),
        "baseline_within": sum(abs(base(r)) <= band for r in held),
        "baseline_median": statistics.median(abs(base(r)) for r in held),
        "others": {r.name: (r.error, base(r)) for r in others},
        "band": band,
    }
