"""The chapter's audit table is well formed and its stated counts are the table's; its citations
and cross-references resolve."""
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "three_d.md").read_text()
VERDICTS = {"right", "imprecise", "wrong", "out of scope"}


def audit_rows():
    rows = [line.split("|")[1:-1] for line in PAGE.splitlines()
            if re.match(r"\| [ABC]\d+ \|", line)]
    return [[cell.strip() for cell in r] for r in rows]


def test_every_row_has_a_verdict_and_evidence():
    rows = audit_rows()
    assert len(rows) >= 60
    ids = [r[0] for r in rows]
    assert len(set(ids)) == len(ids)
    for article in "ABC":                      # numbered 1..n without gaps
        nums = sorted(int(i[1:]) for i in ids if i[0] == article)
        assert nums == list(range(1, len(nums) + 1)), article
    for r in rows:
        assert len(r) == 5, r
        assert r[2] in VERDICTS, r
        assert r[3] and r[4], r


def test_stated_counts_match_the_table():
    counts = collections.Counter(r[2] for r in audit_rows())
    m = re.search(r"Counts: (\d+) claims, (\d+) right, (\d+) imprecise, (\d+) wrong, "
                  r"(\d+) out of scope", PAGE)
    assert m, "the counts sentence is missing"
    stated = [int(x) for x in m.groups()]
    assert stated == [sum(counts.values()), counts["right"], counts["imprecise"],
                      counts["wrong"], counts["out of scope"]]


def test_the_tp_heading_problem_is_named():
    assert "describes **data parallelism**" in PAGE


def test_citations_and_docs_resolve():
    bib = (ROOT / "book" / "references.bib").read_text()
    for group in re.findall(r"\{cite:[pt]\}`([^`]*)`", PAGE):
        for key in group.split(","):
            assert "{" + key.strip() + "," in bib, key
    for target in re.findall(r"\{doc\}`(?:[^<`]*<)?([^>`]+)>?`", PAGE):
        path = (ROOT / "book" / target)
        assert path.with_suffix(".md").exists() or path.with_suffix(".ipynb").exists(), target
