"""The source-article audit (book/audit.md, generated from minipar.audit) is up to date, well
formed, and the only place a verdict is given: every chapter links to its rows, and every link
names a row that exists. The 3D chapter's citations and cross-references resolve."""
import json
import re
from pathlib import Path

from minipar import audit

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
PAGE = (BOOK / "three_d.md").read_text()
CHAPTERS = ("collectives", "data_parallel", "tensor_parallel", "pipeline_parallel",
            "memory_time", "three_d")
LINK = re.compile(r"<audit-([abc]\d+)>")


def _texts():
    """Every page and notebook of the book, as (name, text)."""
    for p in sorted(BOOK.glob("*.md")):
        yield p.name, p.read_text()
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text())["cells"]
        yield p.name, "\n".join("".join(c["source"]) for c in cells)


def test_the_committed_page_is_what_the_data_gives():
    assert (BOOK / "audit.md").read_text() == audit.render(), \
        "book/audit.md is stale: run `python -m minipar.audit`"


def test_every_claim_appears_once_with_a_verdict_and_evidence():
    ids = [c.id for c in audit.CLAIMS]
    assert len(set(ids)) == len(ids)
    for article in audit.ARTICLES:                     # numbered 1..n without gaps
        nums = sorted(int(i[1:]) for i in ids if i[0] == article)
        assert nums == list(range(1, len(nums) + 1)), article
    for c in audit.CLAIMS:
        assert c.verdict in audit.VERDICTS, c
        assert c.claim and c.evidence, c
        assert not c.section or (BOOK / f"{c.section}.md").exists() or \
            (BOOK / f"{c.section}.ipynb").exists() or \
            (BOOK / f"{c.section}").with_suffix(".ipynb").exists(), c
    page = (BOOK / "audit.md").read_text()
    for c in audit.CLAIMS:
        assert page.count(f"({audit.label(c.id)})=") == 1, c.id


def test_the_issues_verdicts_and_the_added_claims():
    v = {c.id: c.verdict for c in audit.CLAIMS}
    # revisited with the chapters' evidence (issue 18)
    assert (v["A15"], v["C9"], v["B17"], v["C5"], v["C11"], v["B6"], v["C4"]) == \
        ("imprecise", "imprecise", "imprecise", "imprecise", "imprecise", "right", "wrong")
    # the claims the audit missed, one row each
    for cid in ("B20", "B21", "B22", "B23", "C39", "C40", "C41"):
        assert cid in v
    a6 = next(c for c in audit.CLAIMS if c.id == "A6").evidence
    assert "4\\Psi" in a6 and "22 s" in a6                   # 2 × 2Ψ bytes, not 2Ψ


def test_every_audit_link_in_the_book_names_an_existing_row():
    rows = {c.id.lower() for c in audit.CLAIMS}
    linked = set()
    for name, text in _texts():
        for cid in LINK.findall(text):
            assert cid in rows, f"{name} links to audit-{cid}, which is not a row"
            linked.add(cid)
    # a chapter that judged claims links to its rows instead of restating a verdict
    for slug in CHAPTERS:
        text = (BOOK / f"{slug}.md").read_text()
        assert LINK.search(text), f"{slug}.md links to no audit row"
        assert "| verdict |" not in text, f"{slug}.md still has its own verdict column"
    assert len(linked) >= 60


def test_one_short_title_per_article():
    old = ("(000)", "(001)", "(004)", "*Comm. Overhead*", "*What Is TP*", "*Comparative*)")
    for slug in CHAPTERS:
        text = (BOOK / f"{slug}.md").read_text()
        for name in old:
            assert name not in text, (slug, name)


def test_the_tp_heading_problem_is_named():
    assert "describes **data parallelism**" in (BOOK / "audit.md").read_text()


def test_citations_and_docs_resolve():
    bib = (BOOK / "references.bib").read_text()
    for page in (PAGE, (BOOK / "audit.md").read_text()):
        for group in re.findall(r"\{cite:[pt]\}`([^`]*)`", page):
            for key in group.split(","):
                assert "{" + key.strip() + "," in bib, key
        for target in re.findall(r"\{doc\}`(?:[^<`]*<)?([^>`]+)>?`", page):
            path = BOOK / target
            assert path.with_suffix(".md").exists() or path.with_suffix(".ipynb").exists(), \
                target


def test_cost_comparison_reads_the_three_servers_rows():
    """What the chapter's cost-per-token paragraph glues, computed from cost_per_token."""
    from minipar.three_d import chapter as C

    c = C.cost_comparison(2.69, 1.99)
    nv, pc, link_only = c["usd"]
    assert [r["usd_per_million_tokens"] for r in c["rows"].values()] == [nv, pc, link_only]
    assert c["facts"]["nvlink_cheapest"] == (nv < pc)
    assert c["cheaper_token"].startswith("the PCIe server" if pc < nv else "the NVLink server")
    assert abs(c["price_gap"] - 100 * (2.69 / 1.99 - 1)) < 1e-9
    assert c["usd_ideal"][0] < c["usd_ideal"][1] and c["ideal_nvlink_zero3"]
