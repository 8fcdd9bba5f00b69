"""The source-article audit (book/audit.md, generated from book/_ext/audit.py) is up to date, well
formed, and the only place a verdict is given: every chapter links to its rows, and every link
names a row that exists. The 3D chapter's citations and cross-references resolve."""

import json
import re
import sys
from pathlib import Path

import pytest

from minipar import chapters

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK / "_ext"))
sys.path.insert(0, str(BOOK / "glue"))
import audit  # noqa: E402 (book/_ext joins sys.path above: the audit is the book's build code)
import three_d as sentences  # noqa: E402 (book/glue joins sys.path above: the book's sentences)
import three_d_runs as C  # noqa: E402 (book/glue joins sys.path above: the chapter's rows)

# the chapter: its main path and its appendix (calibration, validation, the runs it checks)
PAGE = (BOOK / "three_d.md").read_text() + (BOOK / "three_d_appendix.md").read_text()
# the chapters the audit of the source articles sends a reader to for a claim's evidence
SHOWN_IN = {c.section.removeprefix("../notebooks/") for c in audit.CLAIMS}
CHAPTERS = tuple(slug for slug in chapters.SLUGS if slug in SHOWN_IN)
LINK = re.compile(r"<audit-([abc]\d+)>")


def _texts():
    """Every page and notebook of the book, as (name, text)."""
    for p in sorted(BOOK.glob("*.md")):
        yield p.name, p.read_text()
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text())["cells"]
        yield p.name, "\n".join("".join(c["source"]) for c in cells)


def test_the_committed_page_is_what_the_data_gives():
    assert (BOOK / "audit.md").read_text() == audit.render(), (
        "book/audit.md is stale: run `python book/_ext/audit.py`"
    )


def test_every_claim_appears_once_with_a_verdict_and_evidence():
    ids = [c.id for c in audit.CLAIMS]
    assert len(set(ids)) == len(ids)
    for article in audit.ARTICLES:  # numbered 1..n without gaps
        nums = sorted(int(i[1:]) for i in ids if i[0] == article)
        assert nums == list(range(1, len(nums) + 1)), article
    for c in audit.CLAIMS:
        assert c.verdict in audit.VERDICTS, c
        assert c.claim and c.evidence, c
        assert (
            not c.section
            or (BOOK / f"{c.section}.md").exists()
            or (BOOK / f"{c.section}.ipynb").exists()
            or (BOOK / f"{c.section}").with_suffix(".ipynb").exists()
        ), c
    page = (BOOK / "audit.md").read_text()
    for c in audit.CLAIMS:
        assert page.count(f"({audit.label(c.id)})=") == 1, c.id


def test_the_audited_verdicts_and_the_added_claims():
    v = {c.id: c.verdict for c in audit.CLAIMS}
    # revisited with the chapters' evidence
    assert (v["A15"], v["C9"], v["B17"], v["C5"], v["C11"], v["B6"], v["C4"]) == (
        "imprecise",
        "imprecise",
        "imprecise",
        "imprecise",
        "imprecise",
        "right",
        "wrong",
    )
    # the claims the audit missed, one row each
    for cid in ("B20", "B21", "B22", "B23", "C39", "C40", "C41"):
        assert cid in v
    a6 = next(c for c in audit.CLAIMS if c.id == "A6").evidence
    assert "4\\Psi" in a6 and "22 s" in a6  # 2 × 2Ψ bytes, not 2Ψ


def test_every_audit_link_in_the_book_names_an_existing_row():
    rows = {c.id.lower() for c in audit.CLAIMS}
    linked = set()
    for name, text in _texts():
        for cid in LINK.findall(text):
            assert cid in rows, f"{name} links to audit-{cid}, which is not a row"
            linked.add(cid)
    # a chapter that judged claims links to its rows instead of restating a verdict (from its
    # main path or from its appendix, where "The source articles" may live)
    for slug in CHAPTERS:
        text = (BOOK / f"{slug}.md").read_text()
        appendix = BOOK / f"{slug}_appendix.md"
        both = text + (appendix.read_text() if appendix.exists() else "")
        assert LINK.search(both), f"{slug}.md and its appendix link to no audit row"
        assert "| verdict |" not in text, f"{slug}.md still has its own verdict column"
    assert len(linked) >= 60


def test_one_short_title_per_article():
    # numbered file names and abbreviations the pages once used instead of the short titles
    old = tuple(f"({n:03d})" for n in (0, 1, 4)) + (
        "*Comm. Overhead*",
        "*What Is TP*",
        "*Comparative*)",
    )
    for slug in CHAPTERS:
        text = (BOOK / f"{slug}.md").read_text()
        for name in old:
            assert name not in text, (slug, name)


def test_citations_and_docs_resolve():
    bib = (BOOK / "references.bib").read_text()
    for page in (PAGE, (BOOK / "audit.md").read_text()):
        for group in re.findall(r"\{cite:[pt]\}`([^`]*)`", page):
            for key in group.split(","):
                assert "{" + key.strip() + "," in bib, key
        for target in re.findall(r"\{doc\}`(?:[^<`]*<)?([^>`]+)>?`", page):
            path = BOOK / target
            assert path.with_suffix(".md").exists() or path.with_suffix(".ipynb").exists(), target


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_cost_comparison_reads_the_three_servers_rows():
    """What the chapter's cost-per-token paragraph glues, computed from cost_per_token."""
    c = C.cost_comparison(2.69, 1.99)
    nv, pc, link_only = c["usd"]
    assert [r["usd_per_million_tokens"] for r in c["rows"].values()] == [nv, pc, link_only]
    assert c["facts"]["nvlink_cheapest"] == (nv < pc)
    assert c["cheaper_token"].startswith("the PCIe server" if pc < nv else "the NVLink server")
    assert abs(c["price_gap"] - 100 * (2.69 / 1.99 - 1)) < 1e-9
    # NCCL's hierarchical ZeRO-3 (the default) makes the NVLink server's best a ZeRO-3 layout;
    # at DeepSpeed's 2021 flat-ring rate that token costs more, and the page's phrase for its
    # best layout follows the planner's choice
    assert c["nvlink_zero3"] and c["usd_flat"][0] > nv
    assert c["flat_best"] == ("still a ZeRO-3 one" if c["flat_nvlink_zero3"] else "another")


def test_hand_calculation_six_tp_all_reduces_and_activations_without_sp():
    """The by-hand layout has full recomputation and no sequence parallelism: six TP
    all-reduces per layer per micro-batch (two forward, two recomputed, two backward) and the
    recomputed layer's activations sbh(10 + 24/t) + 5as²b/t (Korthikanti Table 2 without SP).
    Negative controls: four all-reduces, or the sequence-parallel formula (34sbh + 5as²b)/t,
    give the numbers the page used to print (0.35 GB, 0.33 GiB)."""
    h = C.hand_calculation()
    assert h["tp_allreduces"] == 6 and round(h["tp_GB_per_layer"], 2) == 0.53
    assert round(h["tp_s"], 1) == 2.0 and round(h["layer_GiB"], 2) == 0.54
    s, b, hid, a, t = 2048, 1, 12288, 96, 8
    sp_formula = (34 * s * b * hid + 5 * a * s * s * b) / t / 2**30
    assert round(sp_formula, 2) == 0.33 != round(h["layer_GiB"], 2)
    assert round(4 / 6 * h["tp_GB_per_layer"], 2) == 0.35
    # t = 16 over two nodes: a ring per NIC (8 × 25 GB/s) against one NIC's 25 GB/s
    assert round(h["tp16_ratio"], 1) == 1.6 and round(h["tp16_one_nic_ratio"]) == 13
    assert "0.54 GiB" in PAGE and "0.53$ GB" in PAGE and "about 1.6 times" in PAGE
    assert "0.33 GiB" not in PAGE and "about 13 times longer (a link" not in PAGE


def test_pcie_preset_has_its_own_sms_and_hbm():
    g = C.H100_PCIE
    assert (g.sms, g.peak_flops["bf16"]) == (114, 756e12)
    assert g.hbm_bandwidth == pytest.approx(2.0e12 * 4.22 / 4.8)  # datasheet × the H200's achieved


def _notebook_names() -> set:
    cells = json.loads((ROOT / "notebooks" / "three_d.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    names = set(re.findall(r'"(\w+)"', code))  # glue("x", ...) and loop keys
    for prefix in re.findall(r'\(\("(\w+)", \w+\), \("(\w+)", \w+\)\)', code):
        for suffix in re.findall(r'glue\(f"\{key\}_(\w+)"', code):
            names.update(f"{p}_{suffix}" for p in prefix)
    return names


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_every_number_the_page_quotes_is_glued_by_the_notebook():
    """Each {glue:text} key of book/three_d.md is glued in notebooks/three_d.ipynb, literally
    or through book/glue/three_d_runs.py's validation_glue; the §5.2 account is glued as numbers,
    not as a paragraph. Negative control: a misspelt key is reported."""
    known = _notebook_names() | set(C.validation_glue())
    keys = re.findall(r"three_d\.ipynb::(\w+):", PAGE)
    assert len(keys) > 40
    missing = sorted(set(keys) - known)
    assert not missing, missing
    assert "zero3_sentence" not in PAGE
    assert "val_within_10" not in known  # the control: a misspelt key


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_table1_account_holds_and_a_contradiction_is_named():
    """The chapter's account of Table 1 at the planner's micro-batch (every row within ±10 %;
    the 2021 model with η alone fitted orders it wrongly) holds; a row predicted too slow, or
    too fast, is named."""
    from dataclasses import replace

    val = C.validation_summary()
    assert C.table1_misses(val) == []
    g = C.validation_glue(val)
    assert g["q_measured"] > g["q_model"] + 0.1
    assert g["old_spearman"] < 0.6 <= g["fit_spearman"] and g["fit_held_within10"] == 5
    rows = val["modes"]["planner"]["rows"]
    slow, fast = replace(rows[0], error=+15.0), replace(rows[1], error=-11.0)
    bad = dict(
        val,
        modes=dict(
            val["modes"], planner=dict(val["modes"]["planner"], rows=[slow, fast] + rows[2:])
        ),
    )
    assert C.table1_misses(bad) == [
        f"{slow.name}: +15.0 % (too slow)",
        f"{fast.name}: -11.0 % (too fast)",
    ]


def test_the_zero3_clause_is_built_in_the_books_glue_from_the_models_numbers():
    """book/glue/three_d.py writes the §5.2 clause from zero3_missing_effect's numbers (the
    library returns only numbers); the memory limit it quotes is named as the GPU's memory less
    the headroom. Negative control: a planted ratio below 1 turns the clause around."""
    from minipar.cost.validation import published as validation

    e175 = validation.zero3_missing_effect("gpt3-175b")
    e530 = validation.zero3_missing_effect("mt-nlg-530b")
    text = sentences.zero3_sentence([e175, e530])
    assert text.startswith("the planner puts PTD-P ahead") and "hierarchical" in text
    assert f"{e175['ratios'][1]:.2f} for 175B on 768 GPUs" in text
    assert "640 GPUs" in text and f"{e175['zero3_step_published'][0]:.0f} s" in text
    limit = f"{e530['limit_gib']:.0f} GiB a layout may use, {e530['gpu_gib']:.0f} GiB less the 10 %"
    assert f"{e530['zero3_gib'][0]:.0f} GiB against the " + limit in text
    wrong = dict(e175, ratios=[0.5, 0.9, 0.95])
    assert sentences.zero3_sentence(wrong).startswith("the planner does not reproduce")


# claims the chapter once made and the planner's model no longer supports, each with the reason
RETRACTED = {
    "0.72 ms": "the fixed per-layer time is replaced by the recipe's element-wise kernels",
    "table is out of sample for time": "the H200 element-wise rate was fitted on the fused step rows",
    "One H200, out of sample": "the H200 element-wise rate was fitted on the fused step rows",
    "that paper measured": "GPT-3's 140 TFLOP/s is an assumed figure, not a measured run",
    "tens of thousands of tokens": "NVIDIA's H100 recipes use cp = 2 at 8K",
    "The effect that matters is": "the attention scores' traffic is a hypothesis",
    "kernel launch gaps": "the H200 and H100 presets price each kernel's issue time",
}


def retracted_claims(name: str, text: str) -> list[str]:
    flat = " ".join(text.split())
    return [f"{name}: {claim!r} ({why})" for claim, why in RETRACTED.items() if claim in flat]


def test_the_chapter_makes_no_retracted_claim():
    """The chapter, its appendix and its notebook's prose make none of the claims the planner's
    model no longer supports. Negative control: a planted one is named."""
    cells = json.loads((ROOT / "notebooks" / "three_d.ipynb").read_text())["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    bad = retracted_claims("three_d pages", PAGE) + retracted_claims("three_d.ipynb", prose)
    assert not bad, bad
    planted = "It pays from a few tens of\nthousands of tokens per sequence."
    assert retracted_claims("planted", planted) == [
        "planted: 'tens of thousands of tokens' (NVIDIA's H100 recipes use cp = 2 at 8K)"
    ]


def test_an_audit_row_naming_an_unknown_page_or_verdict_is_refused(tmp_path):
    """audit_claims.toml is checked as it loads: a section must be a chapter of minipar.chapters
    (or its notebook, or empty), a verdict one of VERDICTS."""
    row = 'id = "A1"\nclaim = "c"\nevidence = "e"\n'
    bad = tmp_path / "claims.toml"
    bad.write_text(f'[[claim]]\n{row}verdict = "right"\nsection = "data_paralel"\n')
    with pytest.raises(ValueError, match=r"claim 1 \(A1\): section 'data_paralel' is neither"):
        audit.load(bad)
    bad.write_text(f'[[claim]]\n{row}verdict = "mostly"\nsection = ""\n')
    with pytest.raises(ValueError, match="verdict 'mostly' is not one of"):
        audit.load(bad)
    good = f'[[claim]]\n{row}verdict = "wrong"\nsection = "../notebooks/three_d"\n'
    bad.write_text(good)
    assert audit.load(bad) == (audit.Claim("A1", "c", "wrong", "e", "../notebooks/three_d"),)
