"""Figures of the context-parallel chapter, drawn from ``minipar.context_parallel`` (the
sharding functions, the ring's pair plan, Ulysses' head plan) and ``minipar.cost.chapters.context_parallel``
(bytes each rank sends).

The chunk maps and the ring use cp = 4 ranks, the smallest ring in which every kind of step
(own block, earlier block, later block) appears on some rank.
"""

from __future__ import annotations

from figures.kit import figure
from minipar.context_parallel.ring import plan
from minipar.context_parallel.sharding import chunk_ids, positions
from minipar.context_parallel.ulysses import heads_after_all_to_all
from minipar.cost.chapters import context_parallel as C

CP = 4
LAYOUTS = ("contiguous", "zigzag", "striped")


def _owners(s: int, cp: int, layout: str) -> list[int]:
    """The rank that holds each global position, from :func:`positions`."""
    owner = [0] * s
    for r in range(cp):
        for p in positions(s, cp, r, layout).tolist():
            owner[p] = r
    return owner


def _off(ax):
    ax.set_facecolor("none")
    ax.set_xticks([])
    ax.set_yticks([])
    for sp in ax.spines.values():
        sp.set_visible(False)


@figure(draws=["minipar.context_parallel.sharding.positions"], phone=True)
def chunk_maps(pal):
    """Three layouts of s = 16 tokens on cp = 4 ranks: the strip on top says which rank holds
    each token; below, the causal mask (query row i sees keys j ≤ i), each visible entry in the
    colour of the rank that computes it (the query's owner); under it, each rank's entries. On a
    phone the three panels are rows, each layout's name and counts to the right of its mask."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    s = 16
    if pal.phone:
        fig, axes = pal.subplots(3.6, 6.0, nrows=3)
    else:
        fig, axes = pal.subplots(6.8, 3.3, ncols=3)
    for ax, layout in zip(axes, LAYOUTS):
        owner = _owners(s, CP, layout)
        work = [0] * CP
        for i in range(s):  # query i sees i + 1 keys
            work[owner[i]] += i + 1
        for j in range(s):  # the strip: owner of each token
            ax.add_patch(
                plt.Rectangle(
                    (j, 1.2), 1, 1, facecolor=pal.color(owner[j]), edgecolor=pal.fg, lw=0.4
                )
            )
        for i in range(s):
            for j in range(i + 1):
                ax.add_patch(
                    plt.Rectangle(
                        (j, -i - 1), 1, 1, facecolor=pal.color(owner[i]), edgecolor="none"
                    )
                )
        ax.plot([0, s, s, 0, 0], [0, 0, -s, -s, 0], color=pal.muted, lw=0.6)
        ax.set_xlim(-0.2, s + (15 if pal.phone else 0.2))
        ax.set_ylim(-s - 0.2, 2.4)
        ax.set_aspect("equal")
        _off(ax)
        ratio = max(work) / (sum(work) / CP)
        counts = ", ".join(str(w) for w in work)
        if pal.phone:  # the words beside the mask, not above and below it
            ax.text(s + 1.2, 1.7, layout, va="center", fontsize=10, color=pal.fg)
            ax.text(
                s + 1.2,
                -1.0,
                f"slowest / mean\n= {ratio:.2f}\n\nentries per rank:\n{counts}",
                va="top",
                fontsize=9,
                color=pal.fg,
            )
            continue
        ax.set_title(f"{layout}\nslowest / mean = {ratio:.2f}", fontsize=10)
        ax.set_xlabel("entries per rank:\n" + counts, fontsize=9)
    axes[0].text(-0.6, 1.7, "owner", ha="right", va="center", fontsize=9)
    axes[0].text(-0.6, -s / 2, "query →", ha="right", va="center", fontsize=9, rotation=90)
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor=pal.color(r), edgecolor=pal.fg, lw=0.4)
        for r in range(CP)
    ]
    fig.legend(
        handles,
        [f"rank {r}" for r in range(CP)],
        loc="lower center",
        ncol=2 if pal.phone else CP,
        bbox_to_anchor=(0.5, -0.04),
        handlelength=1.2,
    )
    if pal.phone:
        fig.subplots_adjust(hspace=0.1, bottom=0.1, top=0.99)
    else:
        fig.subplots_adjust(wspace=0.12, bottom=0.2)
    return fig


_KIND = {"full": 2, "causal": 4}  # series colours: a whole pair (green), the diagonal (sky)


@figure(
    draws=[
        "minipar.context_parallel.ring.plan",
        "minipar.context_parallel.sharding.chunk_ids",
    ],
    phone=True,
)
def ring_steps(pal):
    """Causal ring attention, zigzag, cp = 4: at step i rank r holds the K/V of rank r − i.
    Each cell is the 2 × 2 grid of (query chunk, key chunk) pairs of that rank and step, as
    ``plan`` returns them: whole, diagonal (triangular mask) or skipped. On a phone the same
    grid a little smaller, its legend in two columns."""
    import matplotlib.patches as mpatches  # noqa: PLC0415 (lazy: matplotlib)
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    layout = "zigzag"
    fig, ax = pal.subplots(6.4, 4.0) if pal.phone else pal.subplots(6.4, 4.2)
    gap = 0.9
    for r in range(CP):
        q_ids = chunk_ids(r, CP, layout)
        for step in range(CP):
            src = (r - step) % CP
            k_ids = chunk_ids(src, CP, layout)
            todo = {(i, j): m for i, j, m in plan(q_ids, k_ids, causal=True)}
            x0, y0 = step * (2 + gap), -r * (2 + gap)
            work = 0.0
            for i in range(2):
                for j in range(2):
                    kind = todo.get((i, j))
                    work += {"full": 1, "causal": 0.5, None: 0}[kind]
                    ax.add_patch(
                        plt.Rectangle(
                            (x0 + j, y0 - i - 1),
                            1,
                            1,
                            facecolor=pal.box if kind is None else pal.color(_KIND[kind]),
                            edgecolor=pal.fg,
                            lw=0.5,
                            hatch=None if kind else "///",
                        )
                    )
            for j, kc in enumerate(k_ids):
                ax.text(x0 + j + 0.5, y0 + 0.15, f"k{kc}", ha="center", va="bottom", fontsize=9)
            if step == 0:
                for i, qc in enumerate(q_ids):
                    ax.text(x0 - 0.1, y0 - i - 0.5, f"q{qc}", ha="right", va="center", fontsize=9)
            ax.text(
                x0 + 2.12, y0 - 1, f"{work:g}", ha="left", va="center", fontsize=9, color=pal.muted
            )
    for step in range(CP):
        ax.text(step * (2 + gap) + 1, 1.0, f"step {step}", ha="center", va="bottom", fontsize=10)
    for r in range(CP):
        ax.text(-0.9, -r * (2 + gap) - 1, f"rank {r}", ha="right", va="center", fontsize=10)
    ax.set_xlim(-2.6, CP * (2 + gap))
    ax.set_ylim(-CP * (2 + gap) + gap - 0.2, 1.7)
    ax.set_aspect("equal")
    _off(ax)
    handles = [
        mpatches.Patch(facecolor=pal.color(2), edgecolor=pal.fg, label="whole pair"),
        mpatches.Patch(facecolor=pal.color(4), edgecolor=pal.fg, label="diagonal: half"),
        mpatches.Patch(facecolor=pal.box, edgecolor=pal.fg, hatch="///", label="skipped"),
    ]
    fig.legend(
        handles=handles, loc="lower center", ncol=2 if pal.phone else 3, bbox_to_anchor=(0.5, -0.02)
    )
    fig.subplots_adjust(bottom=0.14 if pal.phone else 0.1)
    return fig


@figure(draws=["minipar.context_parallel.ulysses.heads_after_all_to_all"], phone=True)
def ulysses_repartition(pal):
    """Ulysses at cp = 4 with a = 8 query heads and a_kv = 2 K/V heads, s = 16 tokens: before
    the all-to-all rank r holds every head of tokens [4r, 4r + 4); after it, its two query heads
    and the one K/V head they read, for all 16 tokens (each K/V head goes to two ranks, so it
    is repeated before the all-to-all). On a phone, "before" above "after"."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    a, a_kv, cp, s = 8, 2, CP, 16
    n = s // cp
    after_heads = [heads_after_all_to_all(a, a_kv, cp, r) for r in range(cp)]
    kv_rows = [(h, r) for r in range(cp) for h in after_heads[r]["kv"]]  # copies, by rank
    if pal.phone:
        fig, axes = pal.subplots(3.6, 5.6, nrows=2, height_ratios=[a + a_kv + 1, a + 4 + 1])
    else:
        fig, axes = pal.subplots(6.8, 3.2, ncols=2)

    def cell(ax, x, y, r, kv=False):
        ax.add_patch(
            plt.Rectangle(
                (x, y - (0.5 if kv else 0) - 1),
                1,
                1,
                facecolor=pal.color(r),
                edgecolor=pal.fg,
                lw=0.3,
                hatch="..." if kv else None,
            )
        )

    before, after = axes
    for t in range(s):  # before: rank t // n holds every head of token t
        for h in range(a):
            cell(before, t, -h, t // n)
        for h in range(a_kv):
            cell(before, t, -a - h, t // n, kv=True)
    for r, mine in enumerate(after_heads):
        for t in range(s):
            for h in mine["q"]:
                cell(after, t, -h, r)
    for row, (_, r) in enumerate(kv_rows):
        for t in range(s):
            cell(after, t, -a - row, r, kv=True)
    for ax, kv_names, title in (
        (before, [f"kv{h}" for h in range(a_kv)], f"before: {n} tokens per rank, all heads"),
        (after, [f"kv{h}" for h, _ in kv_rows], f"after: {a // cp} query heads per rank"),
    ):
        for h in range(a):
            ax.text(-0.4, -h - 0.5, f"q{h}", ha="right", va="center", fontsize=9)
        for k, name in enumerate(kv_names):
            ax.text(-0.4, -a - k - 1.0, name, ha="right", va="center", fontsize=9)
        ax.set_xlim(-2.4, s + 0.2)
        ax.set_ylim(-a - len(kv_names) - 0.7, 0.2)
        ax.set_aspect("equal")
        _off(ax)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position →", fontsize=9)
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor=pal.color(r), edgecolor=pal.fg, lw=0.4)
        for r in range(cp)
    ]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor=pal.fg, hatch="..."))
    fig.legend(
        handles,
        [f"rank {r}" for r in range(cp)] + ["K/V head"],
        loc="lower center",
        ncol=3 if pal.phone else cp + 1,
        bbox_to_anchor=(0.5, -0.02),
        handlelength=1.2,
        columnspacing=1.0,
    )
    if pal.phone:
        fig.subplots_adjust(hspace=0.35, bottom=0.12, top=0.95)
    else:
        fig.subplots_adjust(wspace=0.12, bottom=0.12)
    return fig


@figure(
    draws=[
        "minipar.cost.chapters.context_parallel.ring_sent_bytes_per_layer",
        "minipar.cost.chapters.context_parallel.allgather_sent_bytes_per_layer",
        "minipar.cost.chapters.context_parallel.ulysses_sent_bytes_per_layer",
    ],
    phone=True,
)
def traffic_vs_cp(pal):
    """Bytes each rank sends per layer (forward + backward, bf16, float32 dK/dV) at Llama 3
    405B's widths (h = 16384, 128 query and 8 K/V heads) and s = 131,072, as cp grows. On a
    phone: narrower, the legend under the axes."""
    s, h, h_kv, a_kv = 131072, 16384, 1024, 8
    cps = [2, 4, 8, 16, 32, 64, 128]
    ring = [C.ring_sent_bytes_per_layer(1, s, h_kv, c)["total"] / 1e9 for c in cps]
    ag = [C.allgather_sent_bytes_per_layer(1, s, h_kv, c)["total"] / 1e9 for c in cps]
    uly = [
        C.ulysses_sent_bytes_per_layer(1, s, h, c, h_kv=h_kv, a_kv=a_kv)["total"] / 1e9 for c in cps
    ]
    fig, ax = pal.subplots(3.6, 3.0) if pal.phone else pal.subplots(6.4, 3.0)
    ax.set_facecolor("none")
    ax.plot(cps, ring, "o-", color=pal.color(5), label="ring attention")
    ax.plot(cps, ag, "s--", color=pal.color(2), label="all-gather CP")
    ax.plot(cps, uly, "^-", color=pal.color(0), label="Ulysses (K/V heads repeated past cp = 8)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(cps, [str(c) for c in cps])
    ticks = [0.25, 0.5, 1, 2, 4]
    ax.set_yticks(ticks, [f"{v:g}" for v in ticks])
    ax.minorticks_off()
    ax.set_xlabel("cp (GPUs one sequence is split over)")
    ax.set_ylabel("GB sent per GPU per layer")
    ax.grid(True, which="major", lw=0.5)
    if pal.phone:
        ax.set_xlabel("cp (GPUs per sequence)")
    pal.legend(ax, "lower left", below=(-0.25, -0.22))
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig


@figure(
    draws=[
        "minipar.cost.chapters.context_parallel.ring_attention_time",
        "minipar.cost.chapters.context_parallel.min_tokens_per_rank_for_overlap",
    ],
    phone=True,
)
def overlap_threshold(pal):
    """The ring's roofline: one causal zigzag step's attention compute (∝ (s/cp)²) against one
    K/V transfer (∝ s/cp) on an H100 at Llama 3 405B's width, cp = 16; a transfer hides where
    the compute line is above it, right of the dot (the threshold, α ignored). On a phone:
    narrower, the legend under the axes."""
    from minipar.cost.kernels.hardware import gpu, link  # noqa: PLC0415 (figures import lazily)

    h, cp, flops = 16384, 16, gpu("H100-SXM").peak_flops["bf16"]
    ns = [2**k for k in range(8, 17)]  # tokens per rank, 256 .. 65536
    ib, nv = link("ib-ndr400"), link("nvlink4-h100")
    lines = [  # (label, link, K/V width, colour, style)
        ("transfer, InfiniBand, K/V as wide as Q", ib, h, 5, "-"),
        ("transfer, NVLink, K/V as wide as Q", nv, h, 0, "-"),
        ("transfer, InfiniBand, 8 of 128 K/V heads", ib, h // 16, 5, "--"),
    ]
    fig, ax = pal.subplots(3.6, 3.2) if pal.phone else pal.subplots(6.4, 3.4)
    ax.set_facecolor("none")
    step = []
    for n in ns:
        shape = C.AttentionShape(1, n * cp, h, cp, layout="zigzag", h_kv=h)
        step.append(C.ring_attention_time(shape, flops=flops, bandwidth=ib.bandwidth)["step"])
    ax.plot(ns, [1e3 * t for t in step], color=pal.fg, lw=2.2, label="compute of one step")
    for label, lk, h_kv, c, ls in lines:
        kv = [C.kv_block_bytes(1, n * cp, h_kv, cp) for n in ns]
        ax.plot(
            ns,
            [1e3 * (lk.alpha + b / lk.bandwidth) for b in kv],
            ls,
            color=pal.color(c),
            lw=1.6,
            label=label,
        )
        n0 = C.min_tokens_per_rank_for_overlap(flops, lk.bandwidth, kv_fraction=h_kv / h)
        t0 = 1e3 * 2 * n0 * n0 * h / flops  # the step's compute at the threshold
        ax.plot([n0], [t0], "o", color=pal.color(c), ms=7, mec=pal.fg)
        ax.annotate(
            f"{n0:,.0f}",
            (n0, t0),
            textcoords="offset points",
            xytext=(-6, 6),
            ha="right",
            fontsize=9,
            color=pal.fg,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns[::2], [f"{n // 1024}K" if n >= 1024 else str(n) for n in ns[::2]])
    ax.minorticks_off()
    ax.set_xlabel("tokens per rank, s / cp")
    ax.set_ylabel("ms per ring step")
    ax.grid(True, which="major", lw=0.5)
    pal.legend(ax, "upper left", fontsize=9)
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig
