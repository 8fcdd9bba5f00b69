import json
import subprocess
import sys

import pytest


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "minipar.cli", "bench", "launch", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_bench_launch_json_keys():
    out = _cli("--ranks", "2", "--repeats", "2", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert {"first_call_s", "repeat_call_s", "repeat_to_first", "backend"} <= set(r)
    assert r["first_call_s"] > 0 and r["repeat_call_s"] > 0


@pytest.mark.parametrize("args, rule", [(["--ranks", "0"], "--ranks must be between 1 and 64"),
                                        (["--repeats", "0"], "--repeats must be at least 1"),
                                        (["--ranks", "x"], "invalid int value")])
def test_bench_launch_bad_input(args, rule):
    out = _cli(*args)
    assert out.returncode == 2 and rule in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
