"""Sentences for the chapter "Putting them together" (book/three_d.md), written from the
planner's numbers.

The book's glue, not the library's: ``minipar.cost`` returns numbers (dicts, floats), and the
sentences that quote them are built here, where the book is. The notebook imports this module
with ``sys.path.insert(0, "../book/glue")``, as it imports ``book/_ext/audit.py``.
"""

from __future__ import annotations

from minipar.cost.planner import three_d
from minipar.cost.validation import published as validation

NAMES = {"gpt3-175b": "175B", "mt-nlg-530b": "530B"}


def _name(e: dict) -> str:
    return NAMES.get(e["model"], e["model"])


def _pair(e: dict, i: int) -> str:
    return (
        f"{e['ratios'][i]:.2f} for {_name(e)} on {e['gpus'][i]} GPUs "
        f"(measured {e['published'][i]:.2f})"
    )


def _head(es: list[dict]) -> str:
    """Whether the planner gets §5.2's direction once the GPU count doubles."""
    if not all(e["ratios"][1] > 1 for e in es):
        return "the planner does not reproduce the direction once the GPU count doubles: " + (
            " and ".join(_pair(e, 1) for e in es)
        )
    grows = all(e["ratios"][-1] > e["ratios"][1] for e in es)
    return (
        "the planner puts PTD-P ahead too once the GPU count doubles, by a ratio of "
        "PTD-P's to ZeRO-3's TFLOP/s per GPU of "
        + " and ".join(_pair(e, 1) for e in es)
        + (", and the gap keeps growing" if grows else ", but the gap does not grow")
        + " at the largest count ("
        + ", ".join(f"{e['ratios'][-1]:.2f} against {e['published'][-1]:.2f}" for e in es)
        + ")"
    )


def _why(es: list[dict]) -> str:
    """Why the flat ring: the bytes ZeRO-3 moves in its measured step."""
    hier = ", ".join(
        f"{_name(e)} {min(e['hierarchical']):.2f}–{max(e['hierarchical']):.2f}" for e in es
    )
    nic = three_d.cluster(8, 8, "A100-80GB").inter.bandwidth / 1e9
    e0 = es[0]
    moved = 4 * 2 * three_d.MODELS[e0["model"]].params  # 3 AG + 1 RS, 16-bit, bytes
    steps = e0["zero3_step_published"]
    stays = (
        f"{steps[1]:.0f} s "
        if round(steps[1]) == round(steps[2])
        else f"{steps[1]:.0f}–{steps[2]:.0f} s "
    )
    return (
        ". Its ZeRO-3 gathers every layer's 16-bit weights three times per micro-batch "
        "(forward, recomputed forward, backward) and reduce-scatters the 16-bit gradients "
        "once, each as a flat ring in which every GPU's whole share crosses its own "
        f"{nic:.0f} GB/s NIC. The measurement asks for it: ZeRO-3's measured step for "
        f"{_name(e0)} stays at {stays}from {e0['gpus'][1]} to {e0['gpus'][2]} GPUs, and moving "
        f"four copies of the weights ({moved / 1e12:.1f} TB) in that time takes "
        f"{moved / steps[1] / 1e9:.0f} GB/s per GPU, about one NIC's rate. With the NCCL-ideal "
        f"hierarchical algorithm instead, ZeRO-3 would come out ahead (ratios {hier})"
    )


def _smallest(e: dict) -> str | None:
    """What the model misses at the smallest GPU count, or None."""
    n = _name(e)
    if not e["zero3_fits"][0]:
        headroom = 100 * (1 - e["limit_gib"] / e["gpu_gib"])
        return (
            f"for {n} its memory model rejects the ZeRO-3 layout that ran on "
            f"{e['gpus'][0]} GPUs ({e['zero3_gib'][0]:.0f} GiB against the "
            f"{e['limit_gib']:.0f} GiB a layout may use, {e['gpu_gib']:.0f} GiB less the "
            f"{headroom:.0f} % headroom: two whole gathered layers and a whole layer's "
            "gradient, where DeepSpeed gathers and reduces in smaller buckets)"
        )
    ratio, pub = e["ratios"][0], e["published"][0]
    if (ratio > 1) == (pub > 1) and abs(ratio / pub - 1) <= 0.15:
        return None
    return (
        f"for {n} on {e['gpus'][0]} GPUs it gives {ratio:.2f} against the measured {pub:.2f}: "
        f"with {e['micro_batch'][0]} sequences per GPU one layer's compute can hide the "
        f"collectives, and the model hides them all ({e['zero3_step'][0]:.0f} s per step), "
        f"while the measured {e['zero3_step_published'][0]:.0f} s lies between that and no "
        f"overlap at all ({e['zero3_step_no_overlap'][0]:.0f} s): how much of the collectives' "
        "time overlapping compute really hides (NCCL kernels share the GPU's SMs and memory "
        "bandwidth) is not modelled"
    )


def zero3_sentence(effects: dict | list[dict] | None = None) -> str:
    """The chapter's §5.2 clause, written from
    :func:`minipar.cost.validation.published.zero3_missing_effect`'s numbers (175B and 530B) whichever
    way they go: the book cannot say more than the model computes."""
    if effects is None:
        effects = [validation.zero3_missing_effect(m) for m in validation.ZERO3_TABLE2]
    es = [effects] if isinstance(effects, dict) else list(effects)
    small = [x for x in (_smallest(e) for e in es) if x]
    off = [
        (_name(e), e["ratios"][1], e["zero3_error"][1])
        for e in es
        if abs(e["ratios"][1] / e["published_doubled"] - 1) > 0.15
    ]
    tail = ""
    if small:
        tail += ". What it still misses is at the smallest count: " + "; ".join(small)
    if off:
        tail += (
            ". At the doubled count the ratio is outside ±15 % of the measured "
            f"{es[0]['published_doubled']:.1f} for "
            + ", ".join(
                f"{n} ({r:.2f}; its ZeRO-3 {err:+.0f} % off the measured throughput)"
                for n, r, err in off
            )
        )
    return _head(es) + _why(es) + tail
