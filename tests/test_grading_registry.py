"""get_task says what failed: an unknown task is "unknown", a grader that exists but cannot be
imported names its module and the error (it used to be reported as an unknown task)."""

import sys

import pytest

from minipar.grading import registry
from minipar.grading.registry import GraderImportError, get_task


def test_a_known_task_loads_its_chapter():
    assert get_task("memory_time.params").id == "memory_time.params"


def test_an_unknown_chapter_or_task_is_unknown():
    with pytest.raises(KeyError, match="unknown exercise task 'no_such_chapter.x'"):
        get_task("no_such_chapter.x")
    with pytest.raises(KeyError, match="unknown exercise task 'memory_time.no_such_task'"):
        get_task("memory_time.no_such_task")


def test_a_grader_that_fails_to_import_says_why(tmp_path, monkeypatch):
    """Negative control: a grader module whose own import fails (a missing dependency, a
    syntax error) is named with its error, not called an unknown task."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "broken_dep.py").write_text("import no_such_dependency_of_minipar\n")
    (pkg / "broken_syntax.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(pkg))
    import minipar.grading as grading

    monkeypatch.setattr(grading, "__path__", [str(pkg), *grading.__path__])
    for name in ("broken_dep", "broken_syntax"):
        sys.modules.pop(f"minipar.grading.{name}", None)
    with pytest.raises(GraderImportError) as e:
        get_task("broken_dep.anything")
    assert "minipar.grading.broken_dep failed to import" in str(e.value)
    assert "No module named 'no_such_dependency_of_minipar'" in str(e.value)
    with pytest.raises(GraderImportError, match=r"broken_syntax failed to import \(SyntaxError"):
        get_task("broken_syntax.anything")
    assert isinstance(e.value, KeyError)  # callers that report unknown tasks report it
    assert "unknown" not in str(e.value)
    assert registry._TASKS.get("broken_dep.anything") is None
