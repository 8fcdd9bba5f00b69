"""Every lazy import (``noqa: PLC0415``) names a kind that CONTRIBUTING.md explains once, or gives
a reason of its own; none is bare."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOQA = re.compile(r"# noqa: PLC0415(?: \((?P<why>.*)\))?\s*$")


def kinds() -> set[str]:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return set(re.findall(r"^  \| `([\w ]+)` \|", text, flags=re.M))


def problems(path: Path, text: str, known: set[str]) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        m = NOQA.search(line)
        if not m:
            continue
        why = m.group("why") or ""
        if why.startswith("lazy: "):
            if why[6:] not in known:
                out.append(f"{path}:{i}: kind {why[6:]!r} is not in CONTRIBUTING.md's table")
        elif len(why.split()) < 3:
            out.append(f"{path}:{i}: a lazy import without its kind or reason")
    return out


def test_every_lazy_import_names_a_known_kind_or_a_reason():
    known = kinds()
    assert {"torch", "matplotlib", "grade extra"} <= known, known
    bad = []
    for root in ("src", "book", "scripts"):
        for p in sorted((ROOT / root).rglob("*.py")):
            bad += problems(p.relative_to(ROOT), p.read_text(encoding="utf-8"), known)
    assert not bad, "\n".join(bad[:10])


def test_an_unknown_kind_and_a_bare_noqa_are_named():
    text = "import a  # noqa: PLC0415 (lazy: numpy)\nimport b  # noqa: PLC0415\n"
    out = problems(Path("x.py"), text, {"torch"})
    assert "kind 'numpy'" in out[0] and "without its kind" in out[1]
