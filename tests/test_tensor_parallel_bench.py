"""``minipar bench tensor_parallel``: runs, reports ``ours_to_dtensor`` and the differences
from DTensor (never a speed assertion)."""

import json

import pytest

from minipar.cli import main


@pytest.mark.slow
def test_bench_tp_json(capsys):
    status = main(
        [
            "bench",
            "tp",
            "--ranks",
            "2",
            "--hidden",
            "48",
            "--batch",
            "2",
            "--seq",
            "8",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    r = json.loads(out.out)  # stdout: the JSON object and nothing else
    assert (r["ranks"], r["h"], r["b"], r["s"]) == (2, 48, 2, 8)
    t = r["step_seconds"]
    assert set(t) == {"ours", "dtensor"} and min(t.values()) > 0
    assert r["ours_to_dtensor"] == pytest.approx(t["dtensor"] / t["ours"])
    for k, seconds in t.items():
        assert r["tokens_per_second"][k] == pytest.approx(2 * 8 / seconds)
    assert r["max_difference_float64"] and max(r["max_difference_float64"].values()) < 1e-12


@pytest.mark.slow
def test_bench_tp_rejects_bad_shapes(capsys):
    status = main(["bench", "tp", "--ranks", "3", "--hidden", "10"])
    out = capsys.readouterr()
    assert status == 2
    assert "4·hidden (40) must be divisible by t (3)" in out.err + out.out
