"""tests/conftest.py: under CI=true a skip fails unless the test is marked gpu; the browser test
is deselected outside `make site-test`; and .ci/run's closing line counts skips."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = """
import pytest
def test_ok(): pass
@pytest.mark.skipif(True, reason="needs node")
def test_node(): pass
@pytest.mark.gpu
def test_gpu(): pytest.skip("no CUDA")
def test_inline(): pytest.skip("inline")
"""


def _pytest(folder: Path, ci: str | None, browser: bool = False):
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MINIPAR_BROWSER_TEST")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # nbval & co. are not needed: faster
    if ci is not None:
        env["CI"] = ci
    if browser:
        env["MINIPAR_BROWSER_TEST"] = "1"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
    )
    return out.stdout.splitlines()[-1], out.stdout


@pytest.mark.slow
def test_ci_turns_unexpected_skips_into_failures(tmp_path):
    for helper in ("conftest.py", "fault_support.py"):  # conftest registers its fixture
        shutil.copy(ROOT / "tests" / helper, tmp_path)
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_site_browser.py").write_text("def test_page(): pass\n")
    local, _ = _pytest(tmp_path, None)
    assert re.match(r"1 passed, 3 skipped, 1 deselected in", local), local
    # under CI, as in make site-test (MINIPAR_BROWSER_TEST=1: the browser test is selected):
    # skipif (setup) is an error, an inline skip a failure, the gpu skip stays a skip
    ci, text = _pytest(tmp_path, "true", browser=True)
    assert re.match(r"1 failed, 2 passed, 1 skipped, 1 error in", ci), ci
    assert "skipped under CI=true (Skipped: needs node)" in text
    assert re.search(r"SKIPPED \[1\] test_cases.py:\d+: no CUDA", text)


def test_closing_line_sums_every_session():
    """.ci/run's awk over two pytest sessions (quiet and verbose summaries, errors count as
    failures)."""
    text = (ROOT / ".ci" / "run").read_text()
    awk = re.search(r"awk '(.*?)' \"\$log\"", text, re.S).group(1)
    log = (
        "..s\n3 failed, 120 passed, 2 skipped, 1 deselected in 12.30s\n"
        "make: *** [Makefile:1: unit] Error 1\n"
        "== 7 passed, 1 skipped, 2 errors in 3.10s ==\n"
        "1 passed in 0.5s\n"
    )
    out = subprocess.run(["awk", awk], input=log, capture_output=True, text=True, check=True)
    assert out.stdout == "128 passed, 5 failed, 3 skipped\n"


def test_ci_scripts_parse():
    for script in (ROOT / ".ci" / "run",):
        subprocess.run(["bash", "-n", str(script)], check=True)
    make = subprocess.run(
        ["make", "-n", "site-test", "gpu-check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, CI="true"),
    )
    assert "chromium is missing under CI=true" in make.stdout and "exit 1" in make.stdout
    assert "scripts/gpu_check.py" in make.stdout


def test_ci_run_fails_when_it_cannot_install_what_tests_need(tmp_path):
    """Under CI=true a missing Node.js whose install fails stops .ci/run before make test;
    outside CI the same failure is a note and the run goes on (here: to a fake make)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package' >&2\nexit 100\n")
    (fake / "make").write_text("#!/bin/sh\necho '2 passed, 1 skipped in 0.10s'\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = dict(
        os.environ, PATH=f"{fake}:{os.environ['PATH']}", MINIPAR_NODE=str(tmp_path / "no-node")
    )
    ci = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run")],
        capture_output=True,
        text=True,
        env=dict(env, CI="true"),
        timeout=60,
    )
    assert ci.returncode == 1 and "could not install nodejs" in ci.stdout, ci.stdout
    assert "make test took" not in ci.stdout
    local = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run")],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "CI"},
        timeout=60,
    )
    assert local.returncode == 0, local.stdout + local.stderr
    assert local.stdout.splitlines()[-1] == "2 passed, 0 failed, 1 skipped"
