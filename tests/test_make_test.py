"""scripts/make_test.sh, make test's long parts one after the other, run with a stand-in for
make: each part's output and end in order, the machine's CPU seconds, and every failed part
named with exit status 1."""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_MAKE = """#!/bin/bash
# $1 is --no-print-directory, $2 the part; each part exits with its *_RC (default 0)
case "$2" in
  unit)
    end=$((SECONDS + 2)); while [ $SECONDS -lt $end ]; do :; done  # about 1.5 CPU-s
    echo "unit ran"; exit "${UNIT_RC:-0}";;
  book-strict) echo "book ran"; exit "${BOOK_RC:-0}";;
  site-test) echo "site ran"; exit "${SITE_RC:-0}";;
esac
exit 9
"""


def _make_test(tmp_path, **exit_codes):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    return subprocess.run(
        [str(ROOT / "scripts" / "make_test.sh"), str(make)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **exit_codes),
    )


@pytest.mark.slow
def test_every_part_runs_and_the_machines_cpu_seconds_are_counted(tmp_path):
    r = _make_test(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    order = ["unit ran", "unit ended", "book ran", "book-strict ended", "site ran", "site-test"]
    order += ["CPUs were busy"]
    assert [out.index(s) for s in order] == sorted(out.index(s) for s in order), out
    for part in ("unit", "book-strict", "site-test"):
        assert re.search(rf"^make test: {part} ended \d+ s after the start$", out, re.M), out
    busy = re.search(r"the machine's CPUs were busy (\d+) CPU-s over (\d+) s on (\d+) cores", out)
    assert busy and int(busy[1]) >= 1 and int(busy[2]) >= 2, out  # the unit part's spin
    assert "FAILED" not in out


@pytest.mark.slow
def test_every_failed_part_is_named(tmp_path):
    r = _make_test(tmp_path, UNIT_RC="3", SITE_RC="4")
    assert r.returncode == 1
    assert "FAILED: make unit (exit status 3)" in r.stdout, r.stdout
    assert "FAILED: make site-test (exit status 4)" in r.stdout, r.stdout
    r = _make_test(tmp_path, BOOK_RC="2")
    assert r.returncode == 1 and "site ran" not in r.stdout
    assert "FAILED: make book-strict (exit status 2)" in r.stdout, r.stdout
    assert "the browser test was not run (the book build failed)" in r.stdout, r.stdout
