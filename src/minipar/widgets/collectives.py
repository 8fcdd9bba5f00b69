"""Explorer for collective costs: op, algorithm, ranks, message size, link preset.

Times come from :func:`minipar.cost.collectives.collective_time` (α-β model, Thakur et al.
2005); busbw from nccl-tests' definition. The "this machine, fitted" preset uses the α and
bandwidth fitted by ``minipar bench collectives`` in the notebook (or a rough default).
"""
from __future__ import annotations

from minipar.cost import collectives as cc
from minipar.cost.hardware import LINKS, Link

MACHINE = "this machine, fitted"
DEFAULT_FIT = (1e-3, 0.3e9)  # α (s), bandwidth (bytes/s): order of gloo on a shared 2-core CPU
SIZES = [2**k for k in range(10, 33)]   # 1 KiB … 4 GiB


def _size_label(s: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if s >= 2**k:
            return f"{s / 2**k:g} {unit}"
    return f"{s} B"


def machine_link(fitted=None) -> Link:
    alpha, bandwidth = fitted or DEFAULT_FIT
    return Link(MACHINE, bandwidth, max(alpha, 0.0),
                source="fitted in this notebook by minipar bench collectives (gloo, loopback)"
                if fitted else "rough default (run the benchmark cell to fit this machine)",
                note="per direction by construction: fit_alpha_beta returns the bandwidth the "
                     "α-β model needs, which is per direction")


def draw(op: str, algorithm: str, n: int, size: int, link: str, fitted=None):
    """Time and busbw vs S for one (op, algorithm, n, link); ValueError for impossible input."""
    import matplotlib.pyplot as plt

    if n < 2:
        raise ValueError(f"n ({n}): a collective on one rank moves nothing; choose n >= 2")
    L = machine_link(fitted) if link == MACHINE else LINKS[link]
    t = [cc.collective_time(op, algorithm, n, s, L.alpha, L.bandwidth) for s in SIZES]
    here = cc.collective_time(op, algorithm, n, size, L.alpha, L.bandwidth)
    bus = [cc.busbw(op, n, s, x) / 1e9 for s, x in zip(SIZES, t)]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    a.loglog(SIZES, t)
    a.plot([size], [here], "o", color="C3")
    a.set(xlabel="S (bytes)", ylabel="time (s)",
          title=f"{op}, {algorithm}, n={n}: {here * 1e6:,.1f} µs at {_size_label(size)}")
    b.semilogx(SIZES, bus)
    b.axhline(L.bandwidth / 1e9, ls="--", color="0.5", label="link, per direction")
    b.plot([size], [cc.busbw(op, n, size, here) / 1e9], "o", color="C3")
    b.set(xlabel="S (bytes)", ylabel="busbw (GB/s, 1 GB = 1e9 B)", title="nccl-tests busbw")
    b.legend(fontsize=8)
    fixup = (op in ("all-reduce", "reduce") and algorithm in ("recursive-doubling", "rabenseifner")
             and n & (n - 1))
    notes = [f"{L.name}: {L.bandwidth / 1e9:.1f} GB/s per direction, α = {L.alpha * 1e6:g} µs. "
             f"Source: {L.source}.", L.note]
    if fixup:
        notes.append(f"n={n} is not a power of two: the extra ranks first fold into partners "
                     "and get the result back (Thakur et al. 2005 §4.4), two more α + Sβ.")
    fig.text(0.01, -0.02, "\n".join(_wrap(x) for x in notes if x), fontsize=7.5, va="top")
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int = 160) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width))


def collectives_explorer(fitted=None, show: bool = True):
    """The chapter's explorer; ``fitted`` = (α, bandwidth) from the notebook's benchmark."""
    import ipywidgets as w

    from minipar.widgets import explorer

    algos = sorted({a for v in cc.ALGORITHMS.values() for a in v})
    controls = dict(
        op=w.Dropdown(options=list(cc.OPS), value="all-reduce", description="op"),
        algorithm=w.Dropdown(options=algos, value="ring", description="algorithm"),
        n=w.IntSlider(value=8, min=2, max=256, description="ranks n"),
        size=w.SelectionSlider(options=[(_size_label(s), s) for s in SIZES], value=2**26,
                               description="S"),
        link=w.Dropdown(options=list(LINKS) + [MACHINE], value="nvlink4-h100",
                        description="link"),
    )
    return explorer(controls, lambda **v: draw(**v, fitted=fitted),
                    title="Collective cost (α-β model) and nccl-tests busbw", show=show)
