"""Bibliography labels in the same author-year form as the citations in the text.

sphinxcontrib-bibtex cites author-year in the text (``bibtex_reference_style: author_year``)
but labels the list with pybtex's ``alpha`` style ([TRG05]) unless told otherwise. This
registers a pybtex style ``minipar``: unsrt formatting, entries sorted by author, year, title,
and labels "Thakur et al., 2005" (one author: "Kaplan, 2020"; two: "Sergeev and Del Balso, 2018").

Two entries that would share a label (the two Narayanan et al. 2021 papers; NVIDIA's 2024
documents) get a, b, ... appended to their *year* when the .bib file is parsed, in title order,
so the citation in the text and the label in the list both read "Narayanan et al., 2021a".
sphinxcontrib-bibtex builds in-text author-year citations from the year field, not from the
list's label, so suffixing only the label would leave the text ambiguous.
"""

from __future__ import annotations

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinxcontrib.bibtex import bibfile


def _last(person) -> str:
    return " ".join(n.render_as("text") for n in person.rich_last_names)


def _author_year(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        who = entry.fields.get("organization") or entry.fields.get("howpublished") or entry.key
        who = str(who).strip("{}")
    elif len(people) == 1:
        who = _last(people[0])
    elif len(people) == 2:
        who = f"{_last(people[0])} and {_last(people[1])}"
    else:
        who = f"{_last(people[0])} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


def distinguish_years(entries) -> None:
    """Append a, b, ... to the year of entries sharing an author-year label (title order)."""
    groups: dict[str, list] = {}
    for entry in entries.values():
        groups.setdefault(_author_year(entry), []).append(entry)
    for same in groups.values():
        if len(same) > 1:
            same.sort(key=lambda e: str(e.fields.get("title", "")).lower())
            for letter, entry in zip("abcdefghijklmnopqrstuvwxyz", same):
                entry.fields["year"] = f"{entry.fields.get('year', 'n.d.')}{letter}"


def _patch_parser() -> None:
    parse = bibfile.parse_bibdata
    if getattr(parse, "__minipar__", False):
        return

    def parse_bibdata(*args, **kwargs):
        data = parse(*args, **kwargs)
        distinguish_years(data.data.entries)
        return data

    parse_bibdata.__minipar__ = True
    bibfile.parse_bibdata = parse_bibdata


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [_author_year(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


class MiniparStyle(UnsrtStyle):
    default_label_style = "minipar_author_year"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "minipar_author_year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "minipar", MiniparStyle)


def setup(app):
    _patch_parser()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
