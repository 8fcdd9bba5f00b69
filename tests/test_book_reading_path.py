"""The reading path: what a reader learning parallelism meets on a chapter's main page.

A caption says what to look at and what the picture shows; which function drew it may follow,
never lead. The main page of a chapter (``book/<slug>.md``) holds no scaffolding: no claim table
with audit IDs, no test file names, no fit statistics, no story of how the course was made; those
live in the chapter's appendix and in ``book/audit.md``. A few figures' captions state numbers the
figure draws; their tests recompute the numbers from the same code.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from minipar.chapters import SLUGS

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK))

from figures import kit  # noqa: E402 (book/ joins sys.path above)

DIRECTIVE = re.compile(
    r"^(?P<fence>[`:]{3,})\{(?P<kind>minipar-figure|minipar-animation|figure)\}[ \t]*(?P<name>\S*)"
    r"\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
#: what marks a caption's first sentence as provenance: code, a file, the package, "drawn"
PROVENANCE = re.compile(r"`|\.py\b|\bminipar\b|\bdrawn\b|\bcomputed (?:with|by)\b", re.I)
#: scaffolding that belongs in an appendix or the audit page, not on a chapter's main page
SCAFFOLDING = {
    "an audit row link": re.compile(r"<audit-[abc]\d+>"),
    "a test file name": re.compile(r"\btests/\w"),
    "a fit statistic (Spearman)": re.compile(r"Spearman"),
    "in-sample language": re.compile(r"in-sample", re.I),
    "the origin story": re.compile(
        r"commissioned|started from|Where it started|source articles|three articles|audit row",
        re.I,
    ),
}
#: an audit ID (A11, B7, C4) in a table row
TABLE_AUDIT_ID = re.compile(r"^\|.*\b[ABC]\d{1,2}\b", re.M)


def captions(text: str) -> list[tuple[str, str]]:
    """(figure name, caption) of every figure or animation directive in ``text``."""
    out = []
    for m in DIRECTIVE.finditer(text):
        lines = [ln for ln in m["body"].splitlines() if not re.match(r"^:[\w-]+:", ln)]
        out.append((m["name"] or m["kind"], " ".join(ln.strip() for ln in lines).strip()))
    return out


def first_sentence(caption: str) -> str:
    """The caption up to its first full stop that ends a sentence (not inside $...$ math)."""
    outside = re.sub(r"\$[^$]*\$", lambda m: "x" * len(m[0]), caption)
    end = re.search(r"[.:](?:\s+(?=[A-Z(*`$])|\s*$)", outside)
    return caption[: end.start() + 1] if end else caption


def caption_problems(text: str) -> list[str]:
    return [
        f"{name}: {first_sentence(cap)!r}"
        for name, cap in captions(text)
        if PROVENANCE.search(first_sentence(cap))
    ]


def scaffolding_problems(text: str) -> list[str]:
    found = [f"{what}: {m[0]!r}" for what, rx in SCAFFOLDING.items() for m in rx.finditer(text)]
    found += [f"an audit ID in a table row: {m[0][:60]!r}" for m in TABLE_AUDIT_ID.finditer(text)]
    return found


def _pages(slug: str) -> list[Path]:
    return [p for p in (BOOK / f"{slug}.md", BOOK / f"{slug}_appendix.md") if p.exists()]


@pytest.mark.parametrize("slug", SLUGS)
def test_captions_lead_with_what_to_see(slug):
    bad = [f"{p.name}: {b}" for p in _pages(slug) for b in caption_problems(p.read_text("utf-8"))]
    assert not bad, "a caption's first sentence names its provenance:\n" + "\n".join(bad)


@pytest.mark.parametrize("slug", SLUGS)
def test_main_page_holds_no_scaffolding(slug):
    bad = scaffolding_problems((BOOK / f"{slug}.md").read_text("utf-8"))
    assert not bad, f"book/{slug}.md (move these to the appendix):\n" + "\n".join(bad)


@pytest.mark.parametrize("slug", SLUGS)
def test_chapter_notebook_prose_holds_no_scaffolding(slug):
    """The run (notebooks/<slug>.ipynb) is on the main path too: its Markdown cells."""
    cells = json.loads((ROOT / "notebooks" / f"{slug}.ipynb").read_text("utf-8"))["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    bad = scaffolding_problems(prose)
    assert not bad, f"notebooks/{slug}.ipynb (move these to the appendix):\n" + "\n".join(bad)


@pytest.mark.parametrize("slug", SLUGS)
def test_chapter_notebook_prints_no_scaffolding(slug):
    """What the run page prints comes from its code cells' strings (f-strings included)."""
    cells = json.loads((ROOT / "notebooks" / f"{slug}.ipynb").read_text("utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    printed = "\n".join(re.findall(r"print\((.*?)\)\s*$", code, re.M | re.S))
    bad = [b for b in scaffolding_problems(printed) if "Spearman" in b or "in-sample" in b]
    assert not bad, f"notebooks/{slug}.ipynb prints:\n" + "\n".join(bad)


def test_intro_tells_no_origin_story():
    bad = scaffolding_problems((BOOK / "intro.md").read_text("utf-8"))
    assert not bad, "book/intro.md:\n" + "\n".join(bad)


def test_done_chapters_have_worked_problems_in_their_sections():
    """Each done chapter has a worked problem with a dropdown answer in at least three of its
    sections (the opening one included)."""
    for slug in SLUGS:
        text = (BOOK / f"{slug}.md").read_text("utf-8")
        sections = re.split(r"^## ", text, flags=re.M)
        with_problem = [s for s in sections if "Worked problem" in s and "{dropdown}" in s]
        assert len(with_problem) >= 4, f"book/{slug}.md: {len(with_problem)} sections with one"


def test_the_checks_can_fail():
    """Negative controls: a provenance caption and each kind of scaffolding are caught."""
    bad_fig = (
        "```{minipar-figure} x.y\n:alt: a\n"
        "Drawn from `minipar.cost.f` on 4 ranks. Rank 0 idles.\n```\n"
    )
    good_fig = "```{minipar-figure} x.y\n:alt: a\nRank 0 idles for $p - 1$ slots. From `f`.\n```\n"
    assert caption_problems(bad_fig) and not caption_problems(good_fig)
    for planted in (
        "| overlap | {ref}`A11 <audit-a11>` | x |",
        "| claim | C4 | evidence |",
        "`tests/test_cost_data_parallel.py` checks it.",
        "Spearman ρ = 0.9 in-sample.",
        "The course was commissioned from three short articles.",
    ):
        assert scaffolding_problems(planted), planted
    assert not scaffolding_problems("An A100 has 80 GiB; GB200 NVL72 racks; $A_1$.")


# ---- captions that state numbers the figure draws -------------------------------------------


def _caption(slug: str, name: str) -> str:
    text = (BOOK / f"{slug}.md").read_text("utf-8")
    return dict(captions(text))[name]


def test_bucket_caption_states_the_drawn_bucket_sizes():
    import torch

    from minipar.data_parallel.bucketed import assign_buckets
    from minipar.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(L=2, h=64, a=4, s=16, V=256, dropout=0.0))
    sizes = [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]
    ends = [sum(sizes[i] for i in b) / 2**10 for b in assign_buckets(sizes, 48 * 2**10)]
    cap = _caption("data_parallel", "data_parallel.bucket_assignment")
    m = re.search(r"between ([\d.]+) and ([\d.]+) KiB", cap)
    assert m, f"the caption gives no range of bucket ends: {cap!r}"
    assert (m[1], m[2]) == (f"{min(ends):.1f}", f"{max(ends):.1f}"), (m[0], ends)


def test_memory_stack_caption_and_worked_answer_count_the_same_bytes():
    from figures.memory_time import SHAPE7B

    from minipar.cost.planner.breakdown import per_gpu_memory

    r = per_gpu_memory(**SHAPE7B)
    states = f"{(r.weights + r.gradients + r.optimizer) / 2**30:.1f} GiB"
    psi = f"{r.psi / 1e9:.2f} billion"
    cap = _caption("memory_time", "memory_time.memory_stack")
    assert psi in cap and states in cap, (psi, states, cap)
    text = (BOOK / "memory_time.md").read_text("utf-8")
    problem = text.split("Worked problem", 1)[1].split(":::", 1)[0]
    assert psi in problem and states in problem, (psi, states)


def _drawn(name: str):
    import matplotlib

    matplotlib.use("Agg", force=False)
    return kit.load(name).draw(kit.LIGHT)


def test_rabenseifner_line_stays_visible_over_the_ring():
    fig = _drawn("collectives.all_reduce_cost")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    rab, ring = lines["rabenseifner"], lines["ring"]
    assert rab.get_linestyle() != ring.get_linestyle()
    assert rab.get_zorder() > ring.get_zorder(), "the ring line is drawn over Rabenseifner's"


def test_roofline_points_have_distinct_markers():
    fig = _drawn("memory_time.roofline")
    points = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) == 1]
    markers = [ln.get_marker() for ln in points]
    assert len(points) >= 5 and len(set(markers)) == len(markers), markers


#: how a reader names the palette's colours (kit.Palette.series)
COLOUR_NAMES = {
    "#0072b2": "blue",
    "#e69f00": "orange",
    "#009e73": "green",
    "#cc79a7": "pink",
    "#56b4e9": "blue",
    "#d55e00": "orange",
    "#f0e442": "yellow",
    "#999999": "grey",
}


def test_ring_caption_names_the_edge_colour_the_figure_draws():
    from matplotlib.colors import to_hex

    fig = _drawn("collectives.ring_all_reduce")
    thick = {to_hex(p.get_edgecolor()) for ax in fig.axes for p in ax.patches if p.get_lw() > 2}
    assert len(thick) == 1, thick
    colour = COLOUR_NAMES[thick.pop()]
    keys = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert f"{colour} edge" in keys, (colour, keys)
    assert f"{colour} edge" in _caption("collectives", "collectives.ring_all_reduce"), colour
