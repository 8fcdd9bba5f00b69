"""Ranking: would the planner have chosen the layout a published run's authors chose?

For every published modern row the planner prices (experiments 1 to 4 and the calibration
rows), :func:`minipar.cost.planner.three_d.search` is run free over the layout with what the
authors could not change held fixed: the model and its sequence, the GPU and their count, the
global batch, the precision and the stack's switches (the row's mapping: attention kernel, FP8
scaling, TP overlap, compile, the sharding and overlap of the gradient reduction). Searched: t,
p, d, the micro-batch (powers of two up to 8, or up to the published one where larger), the
interleaving v, the recomputation, the ZeRO stage and sequence parallelism, and context
parallelism up to the published degree (a row with c = 2 may come out at c = 1 or 2; the
search does not go beyond, to keep it to seconds per row). The published layout is then in
the space searched (``published_searched``), but where the search's rules leave it out (ZeRO
over one data-parallel rank, which torchtitan runs over its CP ranks; a micro-batch that is not
a power of two), so a choice is never predicted slower than a published layout the search saw
and that fits.

Each row gives the published layout's predicted step time (as the row's experiment priced it)
against the first choice's, the regret: how much faster the planner predicts its choice,
1 − chosen/published. Where that exceeds :data:`NAMED_ABOVE`, the part of the step that makes it
so is named (:func:`largest_saving`): of the planner's time terms and the compute's pipeline
bubble, the one whose seconds per step fall most from the published layout to the choice.

The search takes minutes for all rows, so its result is kept in ``regret.json``
(:func:`write`), which the tests hold to the planner by re-searching a sample of rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..planner import three_d as planner
from ..planner.term_table import BUBBLE, TERMS
from . import experiment3, experiment4, modern

PATH = Path(__file__).resolve().parent / "regret.json"
NAMED_ABOVE = 10.0
"""The regret, %, above which the term that makes the choice faster is named."""


def _modern_rows() -> list[tuple[dict, str]]:
    """(row, experiment) for every row experiments 1 and 2 and the calibration price."""
    out = []
    for exp, s in (("1", modern.summary()), ("2", modern.summary_2())):
        ids = {e["id"] for e in s["rows"]} | {e["id"] for e in s["calibration"]}
        for r in modern.load()["rows"]:
            if r["id"] in ids:
                out.append((r, "calibration" if modern.role(r) == "calibration" else exp))
    seen, unique = set(), []
    for r, exp in out:
        if r["id"] not in seen:
            seen.add(r["id"])
            unique.append((r, exp))
    return unique


def cases() -> list[dict]:
    """Every published row to rank: its id, experiment, the published layout's :class:`Config`
    and what the search holds fixed (model, cluster, batch, options, the cp bound)."""
    out = []
    for r, exp in _modern_rows():
        m, c = modern._config(r)
        cluster = planner.cluster(r["gpus"], min(8, r["gpus"]), modern.gpu_for(r))
        out.append(dict(row=r, exp=exp, m=m, cl=cluster, c=c, opt=modern.options_for(r)))
    for r in experiment3.kept_rows():
        m, c = experiment3.config_for(r)
        cluster = planner.cluster(r["gpus"], min(8, r["gpus"]), "H100-SXM")
        out.append(dict(row=r, exp="3", m=m, cl=cluster, c=c, opt=experiment3.options_for(r)))
    for r in experiment4.kept_rows():
        m, c = experiment4.config_for(r)
        cluster = planner.cluster(r["gpus"], experiment4.per_node(r), experiment4.gpu_for(r))
        out.append(dict(row=r, exp="4", m=m, cl=cluster, c=c, opt=experiment4.options_for(r)))
    return out


def parts(c: planner.Config) -> dict[str, float]:
    """Seconds per step of each time term (the compute without its bubble) and of the compute's
    pipeline bubble: they sum to the step time."""
    out = {t.name: c.seconds(t.name) for t in TERMS if t.where != "memory"}
    out[BUBBLE] = c.group_seconds()[BUBBLE]
    return out


def largest_saving(published: planner.Config, chosen: planner.Config) -> tuple[str, float]:
    """The part of :func:`parts` whose seconds fall most from ``published`` to ``chosen``, and
    by how many seconds per step."""
    a, b = parts(published), parts(chosen)
    name = max(a, key=lambda k: a[k] - b[k])
    return name, a[name] - b[name]


def _layout(c: planner.Config) -> list:
    layout = c.layout
    return [
        layout.tp,
        layout.pp,
        layout.cp,
        layout.chunks,
        layout.dp,
        layout.micro_batch,
        layout.recompute,
        layout.zero,
    ]


def rank(case: dict) -> dict:
    """One row ranked: the search's first choice against the published layout."""
    r, c = case["row"], case["c"]
    top_b = max(8, c.layout.micro_batch)
    space = planner.Space(max_cp=max(1, r.get("cp") or 1), max_micro_batch=top_b)
    found = planner.search(case["m"], case["cl"], r["global_batch"], space, case["opt"])
    best = found[0]
    regret = 100 * (1 - best.step_seconds / c.step_seconds)
    faster = sum(x.fits and x.step_seconds < c.step_seconds for x in found)
    searched = any(_layout(x) == _layout(c) for x in found)
    out = {
        "id": r["id"],
        "experiment": case["exp"],
        "model": r["model"],
        "gpus": r["gpus"],
        "global_batch": r["global_batch"],
        "precision": r["precision"],
        "published": _layout(c),
        "published_s": c.step_seconds,
        "published_fits": c.fits,
        "published_searched": searched,
        "chosen": _layout(best),
        "chosen_layout": dataclasses.asdict(best.layout),
        "chosen_s": best.step_seconds,
        "chosen_fits": best.fits,
        "regret": regret,
        "faster_layouts": faster,
        "searched": len(found),
        "term": None,
        "term_saving_s": None,
    }
    if regret > NAMED_ABOVE:
        out["term"], out["term_saving_s"] = largest_saving(c, best)
    return out


def compute() -> list[dict]:
    """:func:`rank` of every :func:`cases` row (minutes)."""
    return [rank(k) for k in cases()]


def write() -> None:
    """Search every row again and rewrite ``regret.json``."""
    PATH.write_text(json.dumps({"rows": compute()}, indent=1) + "\n")


def load() -> list[dict]:
    return json.loads(PATH.read_text())["rows"]


def summary(rows: list[dict] | None = None) -> dict:
    """Counts over the ranked rows: the published layout is the first choice (same t, p, c, v,
    d, b), within 5 % and within 10 % of it, beyond 10 %; and the terms named, with their
    counts."""
    rows = load() if rows is None else rows
    named: dict[str, int] = {}
    for e in rows:
        if e["term"]:
            named[e["term"]] = named.get(e["term"], 0) + 1
    return {
        "n": len(rows),
        "same_layout": sum(e["published"][:6] == e["chosen"][:6] for e in rows),
        "within5": sum(e["regret"] <= 5 for e in rows),
        "within10": sum(e["regret"] <= NAMED_ABOVE for e in rows),
        "beyond10": sum(e["regret"] > NAMED_ABOVE for e in rows),
        "median": sorted(e["regret"] for e in rows)[len(rows) // 2],
        "worst": max(e["regret"] for e in rows),
        "named": dict(sorted(named.items(), key=lambda kv: -kv[1])),
    }


if __name__ == "__main__":
    write()
