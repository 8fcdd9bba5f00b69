"""``minipar.grading.notebooks.import_nbformat``: nbformat without jsonschema's "iri" checker,
whose grammars (``rfc3987_syntax``) took most of ``import nbformat``'s CPU in every ``minipar
grade``; the module is hidden only while nbformat imports. Each case runs in a fresh
interpreter (this process's conftest hides the module for good)."""

import subprocess
import sys

import pytest


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.slow
def test_nbformat_imports_without_the_iri_grammars_and_leaves_them_importable():
    got = _fresh(
        "import sys\n"
        "from minipar.grading.notebooks import import_nbformat\n"
        "nbformat = import_nbformat()\n"
        "print('rfc3987_syntax' in sys.modules, 'rfc3987_syntax' in sys.modules.keys())\n"
        "nb = nbformat.v4.new_notebook()\n"
        "nbformat.validate(nb)\n"  # validation itself works without the checker
        "print(nbformat.reads(nbformat.writes(nb), as_version=4) == nb)\n"
        "import rfc3987_syntax\n"  # hidden only while nbformat imported
        "print(rfc3987_syntax.__name__, import_nbformat() is nbformat)\n"
    )
    assert got.splitlines() == ["False False", "True", "rfc3987_syntax True"], got


@pytest.mark.slow
def test_a_plain_import_builds_them():
    """The control: without the helper, importing nbformat imports rfc3987_syntax (were it
    not installed, the helper would have nothing left to save)."""
    got = _fresh("import sys, nbformat; print('rfc3987_syntax' in sys.modules)")
    assert got == "True", got
