"""Memory calculator: per-GPU bytes of a d × t × p training layout, against a GPU's capacity.

Every number comes from :func:`minipar.cost.breakdown.per_gpu_memory` (model states under ZeRO
plus the first pipeline stage's 1F1B activations). The figure shows the selected ZeRO stage next
to the other three, so what each stage shards is visible at a glance.

:func:`memory_time_explorer` is the live explorer (``widgets/memory_time.js``, parity-tested
against ``per_gpu_memory``; works on the static site). ``draw``, ``controls`` and
``memory_explorer`` are the older kernel-only ipywidgets + matplotlib version, kept while
tests/test_memory_measure.py still uses it.
"""
from __future__ import annotations

from minipar.cost.breakdown import check_layout, per_gpu_memory
from minipar.cost.hardware import GPUS, gpu
from minipar.cost.units import GiB

# name -> (L, h, a, V). Shapes as in the papers; Eq. 2 assumes a 4h GeLU MLP and one K/V per
# head, so the "Llama-2 70B-like" shape counts 64.7B, not Llama-2's 69B (SwiGLU, grouped KV).
PRESETS = {
    "GPT-3 175B": (96, 12288, 96, 51200),     # Brown et al. 2020; Megatron's vocabulary
    "Llama-2 70B-like": (80, 8192, 64, 32000),
    "7B (Llama-like)": (32, 4096, 32, 32000),
    "custom": None,
}
PARTS = ("weights", "gradients", "optimizer", "activations")
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52")


def draw(preset="GPT-3 175B", L=96, h=12288, a=96, V=51200, s=2048, b=1, d=4, t=8, p=8,
         zero=1, sp=True, recompute="selective", gpu_name="A100-80GB"):
    """Stacked bars of GiB per GPU for ZeRO stages 0–3 of this layout (the chosen one starred).

    Raises ``ValueError`` naming the broken rule for an impossible layout.
    """
    import matplotlib.pyplot as plt

    if preset not in PRESETS:
        raise ValueError(f"preset ({preset!r}) must be one of {', '.join(PRESETS)}")
    if PRESETS[preset]:
        L, h, a, V = PRESETS[preset]
    check_layout(L, h, a, d=d, t=t, p=p, zero=zero)
    g = gpu(gpu_name)
    rows = [per_gpu_memory(L, h, a, s, V, b=b, d=d, t=t, p=p, zero=k, sp=sp,
                           recompute=recompute) for k in range(4)]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    labels = [f"ZeRO-{k}" + (" ★" if k == zero else "") for k in range(4)]
    bottom = [0.0] * 4
    for part, color in zip(PARTS, COLORS):
        vals = [getattr(r, part) / GiB for r in rows]
        ax.bar(labels, vals, bottom=bottom, color=color, label=part)
        bottom = [x + y for x, y in zip(bottom, vals)]
    for i, tot in enumerate(bottom):
        ax.text(i, tot, f"{tot:.1f}", ha="center", va="bottom", fontsize=9)
    cap = g.memory_bytes / GiB
    ax.axhline(cap, color="k", ls="--", lw=1)
    ax.text(3.45, cap, f"{g.name}: {cap:.0f} GiB", ha="right", va="bottom", fontsize=9)
    ax.set_ylabel("GiB per GPU (first pipeline stage)")
    ax.set_ylim(0, max(max(bottom), cap) * 1.15)
    r = rows[zero]
    ax.set_title(f"{preset}: Ψ = {r.psi / 1e9:.1f}B, L={L} h={h} a={a} s={s} b={b}; "
                 f"d={d} t={t} p={p} (N={d * t * p}), sp={sp}, recompute={recompute}",
                 fontsize=8.5)
    ax.legend(fontsize=8, loc="upper right", ncols=4)
    fig.tight_layout()
    return fig


def controls() -> dict:
    import ipywidgets as w

    def num(desc, value):
        return w.BoundedIntText(value=value, min=0, max=10**7, description=desc,
                                layout=w.Layout(width="150px"))

    return {
        "preset": w.Dropdown(options=list(PRESETS), value="GPT-3 175B", description="model"),
        "L": num("L", 96), "h": num("h", 12288), "a": num("a", 96), "V": num("V", 51200),
        "s": num("s", 2048), "b": num("b", 1), "d": num("d", 4), "t": num("t", 8),
        "p": num("p", 8),
        "zero": w.Dropdown(options=[0, 1, 2, 3], value=1, description="ZeRO"),
        "sp": w.Checkbox(value=True, description="sequence parallel"),
        "recompute": w.Dropdown(options=["none", "selective", "full"], value="selective",
                                description="recompute"),
        "gpu_name": w.Dropdown(options=list(GPUS), value="A100-80GB", description="GPU"),
    }


def memory_explorer(show: bool = True):
    """The live calculator (L, h, a, V are used only with the "custom" preset)."""
    from . import explorer

    return explorer(controls(), draw, "Per-GPU training memory (mixed-precision Adam, 1F1B)",
                    show=show)


def memory_config() -> dict:
    """The JavaScript explorer's data: model presets (L, h, a, V) and GPU memory in bytes."""
    return {"presets": {k: list(v) if v else None for k, v in PRESETS.items()},
            "gpus": {k: g.memory_bytes for k, g in GPUS.items()}}


def memory_time_explorer(**values):
    """The live memory calculator; ``values`` override the default controls."""
    from minipar.widgets import Explorer

    return Explorer("memory_time", "memory", config=memory_config(), values=values)
