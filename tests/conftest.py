"""Shared pytest settings: the ``gpu`` marker, and no silent skips in CI.

* ``@pytest.mark.gpu``: a test that needs CUDA. Without a GPU it skips, and that skip is expected.
* Under ``CI=true`` every other skip is turned into a failure whose message gives the skip's
  reason: CI installs what the tests need (``.ci/run``), so a skip there means a step is missing
  (Node.js for the explorer-parity tests, Chromium for the browser test, ...).
* ``tests/test_site_browser.py`` drives the *built* site, so it belongs to ``make site-test``
  (``MINIPAR_BROWSER_TEST=1``, after the book build); any other session deselects it instead of
  skipping it, so it is counted as "deselected", never as a skip.
* ``short_stall_window``: a context manager that shortens the grader's deadlock window
  (``minipar.grading.limits.STALL_S``, 10 s) to :data:`SHORT_STALL_S` for a wrong answer that
  truly deadlocks (every rank blocked for good: it is caught whatever the window, so waiting
  10 s proves nothing more). ``test_grading_framework.py``'s deadlock test keeps the production
  window and checks it is 10 s; a reference solution is never graded under the short one.
* A stop signal the run was started with ignored (``nohup`` ignores SIGHUP; a shell without job
  control ignores SIGINT in its background jobs) is set back to its default here, before any
  worker or subprocess starts: the fault tests signal their subprocesses and expect them to
  stop, and an ignored disposition would be inherited by every process they start.
* A test not marked ``slow`` that spends over :data:`CPU_SECOND` of its process's CPU time in
  its call is named at the end of the run (``make fast`` leaves out what is marked slow, and
  CONTRIBUTING.md's rule marks such a test): a note to mark it, never a failure, since CPU time
  varies from machine to machine.
* ``rfc3987_syntax`` is never imported in a test process: jsonschema's "iri" checker, which
  builds grammars at import (most of ``import nbformat``'s CPU, see
  ``minipar.grading.notebooks.import_nbformat``, which hides it from ``minipar grade``),
  here hidden for good, since test modules import nbformat (and jsonschema) directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

# jsonschema's optional "iri" checker: an ImportError, which it expects (see the docstring)
sys.modules.setdefault("rfc3987_syntax", None)

BROWSER_TEST = "test_site_browser.py"
SHORT_STALL_S = 2.0  # seconds; 4 samples of limits.SAMPLE_S (0.5 s)
CPU_SECOND = 1.0  # CPU seconds of a test's call above which CONTRIBUTING.md marks it slow
_UNMARKED = []  # (test id, CPU seconds) of the tests over CPU_SECOND not marked slow


for _sig, _default in (
    (signal.SIGHUP, signal.SIG_DFL),
    (signal.SIGTERM, signal.SIG_DFL),
    (signal.SIGINT, signal.default_int_handler),
):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _default)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: GPU-only; skipped without CUDA, expected")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MINIPAR_BROWSER_TEST") == "1":
        return
    browser = [i for i in items if i.path.name == BROWSER_TEST]
    if browser:
        config.hook.pytest_deselected(items=browser)
        items[:] = [i for i in items if i.path.name != BROWSER_TEST]


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return str(longrepr[2])
    return str(longrepr)


def unexpected_skip_message(reason: str) -> str:
    return (
        f"skipped under CI=true ({reason}); in CI only @pytest.mark.gpu tests may skip: "
        "install what the test needs (.ci/run) or mark it gpu if it needs CUDA"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("gpu") is not None:
        return
    report.outcome = "failed"
    report.longrepr = unexpected_skip_message(_skip_reason(report.longrepr))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = time.process_time()
    yield
    spent = time.process_time() - start
    if spent > CPU_SECOND and item.get_closest_marker("slow") is None:
        item.user_properties.append(("unmarked_cpu_s", spent))


def pytest_runtest_logreport(report):
    """On the controller too under xdist: a worker's user_properties come with its report."""
    if report.when == "call":
        _UNMARKED.extend(
            (report.nodeid, v) for k, v in report.user_properties if k == "unmarked_cpu_s"
        )


def pytest_terminal_summary(terminalreporter):
    if _UNMARKED:
        listed = ", ".join(
            f"{n} ({v:.1f} CPU-s)" for n, v in sorted(_UNMARKED, key=lambda x: -x[1])
        )
        tests = f"{len(_UNMARKED)} test" + ("s" if len(_UNMARKED) > 1 else "")
        terminalreporter.write_line(
            f"{tests} not marked slow spent over {CPU_SECOND:g} CPU-second in "
            f"their call (mark them @pytest.mark.slow, CONTRIBUTING.md, Tests): {listed}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at import (``pytest.importorskip``, ``allow_module_level``)."""
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = unexpected_skip_message(_skip_reason(report.longrepr))


@pytest.fixture
def short_stall_window(monkeypatch):
    """``with short_stall_window(): ...`` grades with a deadlock window of SHORT_STALL_S."""
    from minipar.grading import limits

    @contextlib.contextmanager
    def shortened():
        with monkeypatch.context() as m:
            m.setattr(limits, "STALL_S", SHORT_STALL_S)
            yield SHORT_STALL_S

    return shortened


# the fault tests' tagged sandbox (tests/fault_support.py), a fixture of several test files
from fault_support import sandbox  # noqa: E402, F401 (re-exported as a fixture)
