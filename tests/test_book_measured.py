"""A sentence of the book that quotes a measured figure must take it from the run.

Two static checks, in a second, before the book build executes anything:

* every ``{glue:text}`` role on a chapter page, and in a notebook's own Markdown, names a key the
  notebook glues (``glue("key", ...)``, or an f-string pattern ``glue(f"dp_{name}_meas", ...)``
  in one of its code cells): a chapter cannot quote a figure the notebook does not produce;
* a sentence that speaks of a measurement (``measured``, ``on this run``, ``the notebook
  prints`` ...) states no bare number: outside math, code and glue roles, each number in it is
  either glued or listed in :data:`STATED`, with the notebook assertion that checks it (the
  assertion must be in the notebook's source, so a notebook that stops checking it fails here,
  and a run that contradicts it fails the build).

A figure is a number with a unit, a percentage or a ratio, a decimal, or a power of ten; plain
integers (2 ranks, 30 steps) are settings and pass. A figure that is not a result of the run (a
datasheet value, a published figure, a tolerance) is listed in :data:`STATED` with ``None``.
The negative controls plant a measured figure the notebook does not produce and a glue key it
does not glue, and check that both are named.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK, NOTEBOOKS = ROOT / "book", ROOT / "notebooks"

ROLE = re.compile(r"\{glue(?::text)?\}`([^`]*)`")
GLUE_CALL = re.compile(r"""\bglue\(\s*(f?)(["'])(.+?)\2""")
GLUE_VARIABLE = re.compile(r"\bglue\(\s*[A-Za-z_]\w*\s*,")  # glue(k, v) in a loop over a dict
DICT_KEY = re.compile(r"""["'](\w+)["']\s*:|\(\s*["'](\w+)["']\s*,""")  # {"k": v} or ("k", v)
ITEM_KEY = re.compile(r"""\[\s*(f?)(["'])([^"']+)\2\s*\]\s*=""")  # out["k"] = v
CALLED = re.compile(r"\b(\w+)\(")
SRC = ROOT / "src" / "minipar"
CELL = "\n# ---- next cell ----\n"
# what this course ran (published measurements are cited, not glued)
CUE = re.compile(
    r"\b(the notebook|this notebook|this run|the run|on this machine|build machine"
    r"|this book was built|our CPU|traced?|measures|measured here|we measure)",
    re.I,
)
# a figure: a number with a unit, a percentage or a ratio, a decimal, or a power of ten in math
NUMBER = re.compile(
    r"(?<![\w.§-])(\d[\d,]*(?:\.\d+)?)\s*(%|×|x\b|ms\b|µs\b|s\b|MiB\b|"
    r"GiB\b|GB\b|MB\b|KiB\b|kB\b|bytes?\b|TFLOP/s)"
    r"|(?<![\w.§-])(\d+\.\d+)(?![\w.])"
    r"|MATH\[([^\]]*(?:10\^|\\times|\d\.\d)[^\]]*)\]"
)

# Unglued numbers allowed in measurement sentences: (page, number as written) -> the notebook
# assertion that checks it (a fragment of its source), or None for a figure that is not a
# result of the run (a setting, a datasheet or a published figure, a tolerance).
STATED: dict[tuple[str, str], str | None] = {
    # collectives: traced bytes, asserted; the datasheet figure the fits are compared with
    ("collectives.md", "1.5S"): "assert sent == [1.5] * 4",
    ("collectives.md", "450 GB"): None,  # NVLink 4 per direction, a datasheet figure
    ("audit.md", "1.5S"): "assert sent == [1.5] * 4",  # the collectives notebook
    # the collectives appendix: the traced bytes (asserted), the buffer size (a setting), NVLink
    ("collectives_appendix.md", "1.5S"): "assert sent == [1.5] * 4",
    ("collectives_appendix.md", "256 KiB"): None,  # S = 4 * 2**16, an input of the run
    ("collectives_appendix.md", "450 GB"): None,  # NVLink 4 per direction, a datasheet figure
    ("data_parallel.md", "50 ms"): None,  # the straggler's sleep, an input of the run
    ("three_d_appendix.md", "75.7 GiB"): None,  # a plan's memory, tests/test_cost_pipeline_memory
    ("three_d_appendix.md", "3.1"): None,  # Llama 3.1, a model's name beside "the run's config"
    # memory_time: the published run the notebook recomputes (its inputs, its asserted result)
    ("memory_time.md", "312 TFLOP/s"): None,
    ("memory_time.md", "13.75 s"): None,
    ("memory_time.md", "51.4 %"): "assert abs(MFU - 0.514) < 0.005",
    ("memory_time.md", "52.8 %"): "abs(HFU - 0.528) < 0.005",
    # three_d: published runs the planner is set against, the tolerance bands it is judged by,
    # a software version
    ("three_d.md", "1.7"): None,
    ("three_d.md", "140 TFLOP/s"): None,
    ("three_d.md", "60.1 s"): None,
    ("three_d.md", "156 TFLOP/s"): None,
    ("three_d.md", "10 %"): None,
    ("three_d.md", "15 %"): None,
    ("three_d.md", "2.13"): None,
    # the appendices: the same published runs and bands as their chapters, a layout, a band
    # the notebook asserts
    ("three_d_appendix.md", "1.7"): None,
    ("three_d_appendix.md", "140 TFLOP/s"): None,
    ("three_d_appendix.md", "60.1 s"): None,
    ("three_d_appendix.md", "156 TFLOP/s"): None,
    ("three_d_appendix.md", "10 %"): None,
    ("three_d_appendix.md", "15 %"): None,
    ("three_d_appendix.md", "2.13"): None,
    ("expert_parallel_appendix.md", "2 ×"): None,  # the TP 2 × DP 2 layout, a setting
    ("pipeline_parallel_appendix.md", "0.05"): 'abs(meas["1f1b"] - meas["gpipe"]) < 0.05',
    # the notebooks' own prose: settings of their runs, datasheet figures, tolerance bands
    ("collectives.ipynb", "450 GB"): None,
    ("data_parallel.ipynb", "1 MiB"): None,
    ("data_parallel.ipynb", "4 bytes"): None,
    ("expert_parallel.ipynb", "8 bytes"): None,
    ("expert_parallel.ipynb", "4 KiB"): None,
    ("expert_parallel.ipynb", "4 MiB"): None,
    ("expert_parallel.ipynb", "0.01"): None,
    ("expert_parallel.ipynb", "1.3"): 'aux["last"] < 1.3',
    ("three_d.ipynb", "15 %"): None,
    ("three_d.ipynb", "25 %"): None,
}


def strip_markup(text: str) -> str:
    """Prose only: code fences, display and inline math, code spans and roles removed."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(
        r"\$([^$\n]+)\$",
        lambda m: (
            f" MATH[{m.group(1)}] "
            if re.search(r"10\^|\\times|\d\.\d|\d\s*\\?%", m.group(1))
            else " MATH "
        ),
        text,
    )
    text = ROLE.sub(" GLUED ", text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", text)  # {ref}, {cite:p}, {doc} ...
    text = re.sub(r"`[^`]*`", " CODE ", text)
    text = re.sub(r"\([\w/.-]+\.(?:md|ipynb|py)\)|\]\([^)]*\)", " ", text)  # link targets
    return text


def sentences(text: str) -> list[str]:
    prose = strip_markup(text)
    return [
        s.strip()
        for s in re.split(
            r"(?<=[.!?])\s+(?=[A-Z*(])|\n\s*\n|\n\||\n\s*[-*] |"
            r"\n\s*\d+\. ",
            prose,
        )
        if s.strip()
    ]


def unglued_figures(
    page: str, text: str, notebook_source: str = "", stated: dict | None = None
) -> list[str]:
    """'page: "figure" in "sentence..."' for every bare number in a measurement sentence that
    is neither glued nor listed in STATED (with its assertion present in the notebook)."""
    stated = STATED if stated is None else stated
    bad = []
    for sentence in sentences(text):
        if not CUE.search(sentence):
            continue
        for m in NUMBER.finditer(sentence):
            figure = m.group(0).strip()
            number = next(g for g in m.groups() if g)
            key = next(((page, f) for f in (figure, number) if (page, f) in stated), None)
            if key is not None:
                check = stated[key]
                if check is None or check in notebook_source:
                    continue
            bad.append(f'{page}: "{figure}" in "{sentence[:90]}..."')
    return bad


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return CELL.join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def notebook_markdown(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def key_pattern(fstring: str, key: str) -> re.Pattern:
    """A glue key as a pattern: an f-string's ``{...}`` fields match any text."""
    parts = re.split(r"\{[^}]*\}", key) if fstring else [key]
    return re.compile(".+".join(re.escape(p) for p in parts) + r"\Z")


def glued_keys(code: str) -> list[re.Pattern]:
    """The keys a notebook's code glues, f-string keys as patterns (``dp_{name}_meas``); a cell
    that glues ``glue(k, v)`` in a loop glues the string keys of the dict literals in it."""
    keys = []
    for cell in code.split(CELL):
        keys += [key_pattern(f, key) for f, _, key in GLUE_CALL.findall(cell)]
        if GLUE_VARIABLE.search(cell):
            # the keys written in the cell, and in the package functions it calls that build them
            text = cell + "".join(function_source(f) for f in set(CALLED.findall(cell)))
            keys += [re.compile(re.escape(a or b) + r"\Z") for a, b in DICT_KEY.findall(text)]
            keys += [key_pattern(f, k) for f, _, k in ITEM_KEY.findall(text)]
    return keys


_DEFS: dict[str, str] | None = None


def function_source(name: str) -> str:
    """The text of ``def name`` in the package or the book's glue (one level: the function that
    builds a dict of glue values for a notebook, e.g. ``validation_glue``), or ""."""
    global _DEFS
    if _DEFS is None:
        _DEFS = {}
        for path in sorted(SRC.rglob("*.py")) + sorted((BOOK / "glue").glob("*.py")):
            text = path.read_text()
            for m in re.finditer(r"^def (\w+)\(.*?(?=^def |^class |\Z)", text, re.S | re.M):
                _DEFS.setdefault(m.group(1), m.group(0))
    return _DEFS.get(name, "") if name.endswith("glue") else ""


def missing_glue(
    page: str, text: str, own_notebook: str | None = None, sources: dict[str, str] | None = None
) -> list[str]:
    """'page: key' for every glue role whose notebook does not glue that key."""
    sources = sources if sources is not None else {}
    bad = []
    for role in ROLE.findall(text):
        if "::" in role:
            nb, rest = role.split("::", 1)
            nb = Path(nb).stem
        else:
            nb, rest = own_notebook, role
        key = rest.split(":", 1)[0]
        if nb not in sources:
            path = NOTEBOOKS / f"{nb}.ipynb"
            sources[nb] = notebook_code(path) if path.exists() else ""
        if not any(p.match(key) for p in glued_keys(sources[nb])):
            bad.append(f"{page}: {nb}::{key}")
    return bad


def chapter_pages() -> list[Path]:
    """Every chapter page and its appendix (which quotes the same notebook's runs)."""
    return sorted(
        p
        for p in BOOK.glob("*.md")
        if (NOTEBOOKS / f"{p.stem.removesuffix('_appendix')}.ipynb").exists()
    )


def test_every_glue_role_names_a_key_its_notebook_glues():
    bad = []
    for page in sorted(BOOK.glob("*.md")):
        bad += missing_glue(page.name, page.read_text())
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        bad += missing_glue(nb.name, notebook_markdown(nb), nb.stem)
    assert not bad, bad


def test_no_measurement_sentence_states_a_bare_figure():
    bad = []
    for page in chapter_pages():
        source = notebook_code(NOTEBOOKS / f"{page.stem.removesuffix('_appendix')}.ipynb")
        bad += unglued_figures(page.name, page.read_text(), source)
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):  # a notebook's prose about its own run
        bad += unglued_figures(nb.name, notebook_markdown(nb), notebook_code(nb))
    # the claims appendix quotes runs of every chapter: an assertion in any notebook counts
    every = CELL.join(notebook_code(nb) for nb in sorted(NOTEBOOKS.glob("*.ipynb")))
    bad += unglued_figures("audit.md", (BOOK / "audit.md").read_text(), every)
    assert not bad, "\n".join(bad)


def test_negative_control_a_planted_measured_figure_is_named():
    planted = (
        "The notebook's bucket sweep measured 25 ms per step with 32 MiB buckets, "
        "so model and measurement agree."
    )
    bad = unglued_figures("data_parallel.md", planted)
    assert any('"25 ms"' in b for b in bad) and any('"32 MiB"' in b for b in bad), bad
    glued = (
        "The notebook's bucket sweep measured {glue:text}`../notebooks/data_parallel.ipynb"
        "::dp_large_meas:.0f` ms per step."
    )
    assert unglued_figures("data_parallel.md", glued) == []
    # a listed figure whose assertion the notebook lost is named again
    held = "On 4 ranks the notebook measures a bubble of 0.43 of the step."
    listed = {("x.md", "0.43"): "assert abs(bubble - 0.43)"}
    assert unglued_figures("x.md", held, "assert abs(bubble - 0.43) < 0.01", listed) == []
    assert unglued_figures("x.md", held, "print(bubble)", listed) == [
        'x.md: "0.43" in "On 4 ranks the notebook measures a bubble of 0.43 of the step...."'
    ]


def test_negative_control_a_glue_key_the_notebook_does_not_glue_is_named():
    sources = {"data_parallel": 'glue(f"dp_{name}_meas", x)\nglue("dp_tl_one_ms", t)'}
    text = (
        "{glue:text}`../notebooks/data_parallel.ipynb::dp_large_meas:.0f` and "
        "{glue:text}`../notebooks/data_parallel.ipynb::dp_large_meaz:.0f` and "
        "{glue:text}`dp_tl_one_ms:.0f`"
    )
    assert missing_glue("x.md", text, "data_parallel", sources) == [
        "x.md: data_parallel::dp_large_meaz"
    ]
