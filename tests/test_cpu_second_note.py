"""The note conftest.py prints at the end of a run: the tests not marked slow whose call spent
over a CPU-second (CONTRIBUTING.md, Tests), from the reports' user_properties."""

import time
from types import SimpleNamespace

import conftest
import pytest


class _Lines:
    def __init__(self):
        self.lines = []

    def write_line(self, line):
        self.lines.append(line)


def _report(when, props):
    return SimpleNamespace(when=when, nodeid="tests/x.py::test_heavy", user_properties=props)


def test_a_heavy_unmarked_call_is_named_once_and_a_light_one_never(monkeypatch):
    monkeypatch.setattr(conftest, "_UNMARKED", [])
    for when in ("setup", "call", "teardown"):  # every phase's report carries the properties
        conftest.pytest_runtest_logreport(_report(when, [("unmarked_cpu_s", 1.3)]))
    conftest.pytest_runtest_logreport(_report("call", []))
    out = _Lines()
    conftest.pytest_terminal_summary(out)
    assert len(out.lines) == 1 and out.lines[0].startswith("1 test not marked slow"), out.lines
    assert "tests/x.py::test_heavy (1.3 CPU-s)" in out.lines[0]
    monkeypatch.setattr(conftest, "_UNMARKED", [])
    conftest.pytest_terminal_summary(out)
    assert len(out.lines) == 1  # nothing over the line: no note


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests): it spends one, twice
def test_the_call_hook_measures_cpu_time_and_skips_marked_tests():
    def call(marker):
        item = SimpleNamespace(user_properties=[], get_closest_marker=lambda name: marker)
        hook = conftest.pytest_runtest_call(item)
        next(hook)
        start = time.process_time()
        while time.process_time() - start < conftest.CPU_SECOND + 0.1:
            pass
        try:
            next(hook)
        except StopIteration:
            pass
        return item.user_properties

    (prop,) = call(None)
    assert prop[0] == "unmarked_cpu_s" and prop[1] > conftest.CPU_SECOND
    assert call("slow") == []
