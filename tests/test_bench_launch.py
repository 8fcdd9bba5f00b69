import json
import subprocess
import sys

import pytest


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "minipar.cli", "bench", "launch", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_bench_launch_json_is_stdout_and_consistent():
    from minipar.runtime.device import gpu_count

    out = _cli("--ranks", "2", "--repeats", "2", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)  # nothing but the JSON object on stdout
    assert r["ranks"] == 2
    assert r["backend"] == ("nccl" if gpu_count() >= 2 else "gloo")
    assert "minipar.runtime.launch: backend=" in out.stderr  # the launcher's note went to stderr
    assert r["first_call_s"] > 0 and r["repeat_call_s"] > 0
    assert r["repeat_to_first"] == pytest.approx(r["repeat_call_s"] / r["first_call_s"])


@pytest.mark.parametrize(
    "args, rule",
    [
        (["--ranks", "0"], "--ranks (0) must be >= 1"),
        (["--ranks", "65"], "--ranks (65) must be <= 64"),
        (["--repeats", "0"], "--repeats (0) must be >= 1"),
        (["--ranks", "x"], "invalid int value"),
    ],
)
@pytest.mark.slow
def test_bench_launch_bad_input(args, rule):
    out = _cli(*args)
    assert out.returncode == 2 and rule in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
