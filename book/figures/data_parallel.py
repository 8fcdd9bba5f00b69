"""Figures of the data-parallel chapter, drawn from ``minipar.cost`` and ``minipar.data_parallel``."""

from __future__ import annotations

from figures.kit import figure
from minipar.cost.chapters.data_parallel import (
    allreduce_seconds,
    compute_seconds,
    dp_step_time,
    forward_backward,
)
from minipar.cost.chapters.memory_time import ZERO_STAGES, model_state_bytes
from minipar.cost.kernels.hardware import link
from minipar.cost.network.collectives import collective_time
from minipar.data_parallel.bucketed import assign_buckets

GB = 1e9
PARTS = (("weights", 0), ("gradients", 2), ("optimizer", 1))  # field, series colour


@figure(draws=["minipar.cost.chapters.memory_time.model_state_bytes"], phone=True)
def zero_stacks(pal):
    """Model-state bytes per GPU at ZeRO stages 0-3: Ψ = 7.5 B, d = 64, mixed-precision Adam.
    On a phone the bars are narrower and the legend goes below them."""
    psi, d = 7.5e9, 64
    rows = [model_state_bytes(psi, d=d, zero=s) for s in ZERO_STAGES]  # w = g = 2, K = 12
    fig, ax = pal.subplots(3.7, 3.9) if pal.phone else pal.subplots(6.4, 2.9)
    names = ["stage 0\n(DDP)", "stage 1\noptimizer", "stage 2\n+ gradients", "stage 3\n+ weights"]
    if pal.phone:  # the stage and what it adds, short enough for a 0.8 in slot
        names = ["0\nDDP", "1\noptimizer", "2\n+ grads", "3\n+ weights"]
    for i, r in enumerate(rows):
        bottom = 0.0
        for part, c in PARTS:
            v = getattr(r, part) / GB
            ax.bar(
                i,
                v,
                bottom=bottom,
                color=pal.color(c),
                edgecolor=pal.fg,
                lw=0.5,
                width=0.6,
                label=part if i == 0 else None,
            )
            bottom += v
        ax.text(i, bottom + 2, f"{r.total / GB:.1f} GB", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(rows)), names)
    ax.set_ylabel("GB per GPU")
    ax.set_ylim(0, rows[0].total / GB * 1.18)
    if pal.phone:
        ax.set_xlabel("ZeRO stage")
        ax.legend(loc="upper left", bbox_to_anchor=(-0.2, -0.3), ncol=3)
    else:
        ax.legend(loc="upper right")
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return fig


def _ink(pal, fill):
    """Text colour on a box of ``fill``: white on the two dark series colours, else near-black."""
    return "white" if fill in (pal.color(0), pal.color(5)) else "#111"


def _timeline_row(ax, pal, y, spans, color, labels=None):
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    for k, (t0, t1) in enumerate(spans):
        ax.add_patch(
            plt.Rectangle((t0, y), t1 - t0, 0.8, facecolor=color(k), edgecolor=pal.fg, lw=0.5)
        )
        if labels:
            ax.text(
                (t0 + t1) / 2,
                y + 0.4,
                labels[k],
                ha="center",
                va="center",
                fontsize=9,
                color=_ink(pal, color(k)),
            )


@figure(
    draws=[
        "minipar.cost.chapters.data_parallel.dp_step_time",
        "minipar.cost.chapters.data_parallel.allreduce_seconds",
    ],
    phone=True,
)
def dp_timeline(pal):
    """One modelled step of a 1.3B-parameter model on 64 GPUs (8 nodes), 2,048 tokens per GPU,
    bf16 gradients: ten 250 MiB buckets overlap backward; one bucket waits for all of it. On a
    phone the buckets go unnumbered and each title takes two lines."""
    psi, n = 1.3e9, 64
    fwd, bwd = forward_backward(compute_seconds(psi, 2048))
    ar = allreduce_seconds(n)
    cases = [("10 buckets of 250 MiB", 250 * 2**20), ("one bucket", 2 * psi)]
    fig, axes = pal.subplots(*((3.7, 3.8) if pal.phone else (6.4, 3.0)), nrows=2, sharex=True)
    ms = 1e3
    for ax, (title, cap) in zip(axes, cases):
        st = dp_step_time(fwd, bwd, 2 * psi, cap, ar)
        _timeline_row(
            ax,
            pal,
            1,
            [(0, fwd * ms), (fwd * ms, (fwd + bwd) * ms)],
            lambda k: pal.color(4 if k == 0 else 0),
            ["forward", "backward"],
        )
        spans = [(a * ms, b * ms) for a, b in st.intervals]
        _timeline_row(
            ax,
            pal,
            0,
            spans,
            lambda k: pal.color(1 if k % 2 == 0 else 5),
            None
            if pal.phone and len(spans) > 1  # 0.13 in per bucket: no room for "10"
            else [str(k + 1) for k in range(len(spans))]
            if len(spans) > 1
            else ["all-reduce"],
        )
        ax.axvline(st.step_s * ms, color=pal.fg, lw=1, ls="--")
        sep = ":\n" if pal.phone else ": "
        ax.set_title(
            f"{title}{sep}step {st.step_s * ms:.1f} ms, exposed {st.exposed_s * ms:.1f} ms",
            loc="left",
        )
        ax.set_yticks([0.4, 1.4], ["all-reduce", "compute"])
        ax.set_ylim(-0.1, 1.9)
        for s in ("top", "right", "left"):
            ax.spines[s].set_visible(False)
    axes[-1].set_xlim(
        0, max(dp_step_time(fwd, bwd, 2 * psi, c, ar).step_s for _, c in cases) * ms * 1.02
    )
    axes[-1].set_xlabel("time in the step (ms)")
    fig.tight_layout()
    return fig


@figure(draws=["minipar.data_parallel.bucketed.assign_buckets"], phone=True)
def bucket_assignment(pal):
    """The buckets BucketedDataParallel forms for a two-layer GPT (h = 64, fp32 gradients) with a
    48 KiB cap: filled from the last parameter to the first, the order backward produces them.
    On a phone each bar ends with its size only and the axis label is shorter."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.model import GPT, GPTConfig  # noqa: PLC0415 (lazy: torch)

    torch.manual_seed(0)
    model = GPT(GPTConfig(L=2, h=64, a=4, s=16, V=256, dropout=0.0))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    sizes = [p.numel() * p.element_size() for _, p in named]
    cap = 48 * 2**10
    buckets = assign_buckets(sizes, cap)
    fig, ax = pal.subplots(3.7 if pal.phone else 6.4, 0.5 * len(buckets) + 0.8)
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    kib = 2**10
    for row, bucket in enumerate(buckets):
        x = 0.0
        y = -row - 1
        for i in bucket:
            w = sizes[i] / kib
            ax.add_patch(
                plt.Rectangle((x, y), w, 0.8, facecolor=pal.color(row), edgecolor=pal.fg, lw=0.4)
            )
            if w >= 10:  # names of the large tensors; small ones (biases, norms) are slivers
                name = named[i][0].replace("layers.", "L").replace(".weight", "")
                ax.text(
                    x + w / 2,
                    y + 0.4,
                    name,
                    ha="center",
                    va="center",
                    fontsize=9,
                    color=_ink(pal, pal.color(row)),
                )
            x += w
        end = f"{x:.1f} KiB" if pal.phone else f"{x:.1f} KiB, {len(bucket)} tensors"
        ax.text(x + 1, y + 0.4, end, va="center", fontsize=9)
    ax.axvline(cap / kib, color=pal.fg, lw=1, ls="--")
    ax.text(cap / kib + 1, 0.1, "cap: 48 KiB", ha="left", va="bottom", fontsize=9)
    ax.set_yticks(
        [-r - 0.6 for r in range(len(buckets))], [f"bucket {r + 1}" for r in range(len(buckets))]
    )
    ax.set_xlim(0, 95)
    ax.set_ylim(-len(buckets) - 0.1, 0.5)
    ax.set_xlabel(
        "KiB of fp32 gradients, last parameter first"
        if pal.phone
        else "KiB of fp32 gradients, last parameter first (the order backward produces them)"
    )
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)
    return fig


#: the all-reduces of the roofline: (label, n GPUs, nbytes -> seconds)
def roofline_links(n: int = 64):
    """The four ways of all-reducing over ``n`` GPUs the roofline compares: one NVLink node, the
    hierarchical all-reduce over nodes of 8, and a flat ring over InfiniBand or Ethernet."""

    def flat(name):
        lk = link(name)
        return lambda s: collective_time("all-reduce", "ring", n, s, lk.alpha, lk.bandwidth)

    return [
        ("8 GPUs, one NVLink node", allreduce_seconds(8)),
        (f"{n} GPUs, NVLink + InfiniBand", allreduce_seconds(n)),
        (f"{n} GPUs, flat ring, InfiniBand", flat("ib-ndr400")),
        (f"{n} GPUs, flat ring, 100 Gb Ethernet", flat("eth-100g")),
    ]


def tokens_to_hide(allreduce_s: float, psi: float) -> float:
    """Tokens per GPU at which backward (2/3 of 6ΨT at the achieved rate) lasts as long as one
    all-reduce of ``allreduce_s`` seconds: backward is linear in T."""
    return allreduce_s / forward_backward(compute_seconds(psi, 1))[1]


def three_figures(x: float) -> str:
    """``x`` to three significant figures with thousands separators: 1,660, 7,920, 780."""
    return f"{float(f'{x:.3g}'):,.0f}"


@figure(
    draws=[
        "minipar.cost.chapters.data_parallel.compute_seconds",
        "minipar.cost.chapters.data_parallel.allreduce_seconds",
        "minipar.cost.network.collectives.collective_time",
    ],
    phone=True,
)
def dp_roofline(pal):
    """Backward time against tokens per GPU beside the time of one all-reduce of the whole bf16
    gradient (1.3B parameters) over four networks: right of a crossing, communication can hide.
    On a phone the legend goes below the axes."""
    psi = 1.3e9
    ts = [2 ** (k / 4) for k in range(32, 69)]  # 256 ... 131072 tokens per GPU
    ms = 1e3
    fig, ax = pal.subplots(3.7, 4.6) if pal.phone else pal.subplots(6.4, 3.4)
    back = [forward_backward(compute_seconds(psi, t))[1] * ms for t in ts]
    ax.loglog(ts, back, color=pal.fg, lw=2.2)
    ax.text(300, back[0] * (3.4 if pal.phone else 2.2), "backward", fontsize=9, rotation=27)
    for k, (label, ar) in enumerate(roofline_links()):
        y = ar(2 * psi) * ms
        ax.axhline(y, color=pal.color(k), lw=1.6, ls=("-", "--", "-.", ":")[k], label=label)
        t_star = tokens_to_hide(y / ms, psi)
        ax.plot([t_star], [y], "o", color=pal.color(k), ms=7, mec=pal.fg, mew=0.6)
        ax.text(t_star * 1.15, y * 0.8, three_figures(t_star), fontsize=9, va="top")
    ax.set(
        xlabel="tokens per GPU per step",
        ylabel="ms per step",
        xlim=(ts[0], ts[-1]),
        ylim=(2, 3000) if pal.phone else (2, 4e4),
    )
    ax.set_xticks([256, 1024, 4096, 16384, 65536], ["256", "1k", "4k", "16k", "64k"])
    ax.minorticks_off()
    pal.legend(ax, "upper left", title="all-reduce of 2.6 GB over", title_fontsize=9)
    for s_ in ("top", "right"):
        ax.spines[s_].set_visible(False)
    fig.tight_layout()
    return fig
