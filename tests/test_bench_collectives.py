"""``minipar bench collectives``: bad input is one line and exit 2; a tiny run writes JSON/plot."""

import json

import pytest

from minipar.bench.collectives import parse_sizes
from minipar.cli import main


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ranks", "0"], "--ranks (0)"),
        (["--ranks", "two"], "comma-separated integers"),
        (["--sizes", "abc"], "'abc'"),
        (["--sizes", "1MiB..4KiB"], "must be <= end"),
        (["--ops", "all-reduce,gossip"], "'gossip'"),
        (["--iters", "0"], "--iters (0)"),
        (["--ring-ranks", "1"], "--ring-ranks (1) must be >= 2"),
        (["--ranks", "64", "--backend", "nccl"], "needs one GPU per rank: world_size (64)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, words):
    assert main(["bench", "collectives", "--quick", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_size_range_steps_by_four_and_includes_both_ends():
    assert parse_sizes("4KiB..64KiB") == [4096, 16384, 65536]
    assert parse_sizes("4KiB,1MB") == [4096, 1_000_000]


@pytest.mark.slow
def test_tiny_run_prints_json_only_and_writes_json_and_plot(tmp_path, capsys):
    out, fig = tmp_path / "bench.json", tmp_path / "bench.png"
    assert (
        main(
            [
                "bench",
                "collectives",
                "--quick",
                "--ops",
                "all-reduce",
                "--ranks",
                "2",
                "--sizes",
                "4KiB,64KiB",
                "--iters",
                "1",
                "--json",
                "--out",
                str(out),
                "--plot",
                str(fig),
            ]
        )
        == 0
    )
    printed = capsys.readouterr()
    result = json.loads(printed.out)  # stdout is the JSON object and nothing else
    assert json.loads(out.read_text()) == result
    assert "fitted α-β model" in printed.err and f"wrote {fig}" in printed.err
    assert [(r["op"], r["n"], r["bytes"]) for r in result["results"]] == [
        ("all-reduce", 2, 4096),
        ("all-reduce", 2, 65536),
    ]
    for r in result["results"]:  # nccl-tests: busbw = algbw · 2(n−1)/n = algbw for n = 2
        assert r["algbw"] == pytest.approx(r["bytes"] / r["seconds"]) == pytest.approx(r["busbw"])
    [f] = result["fits"]
    assert (f["op"], f["n"], f["algorithm"]) == ("all-reduce", 2, "ring")
    assert f["error"] or f["bandwidth"] > 0
    [ring] = result["ring_vs_dist"]  # the quick preset: one 64 KiB point, n = 4
    assert (ring["n"], ring["bytes"]) == (4, 65536)
    assert ring["ratio"] == pytest.approx(ring["ring_seconds"] / ring["dist_seconds"])
    assert result["machine"]["backend"] == "gloo" and result["iters"] == 1
    assert fig.stat().st_size > 0


def test_plot_without_matplotlib_fails_before_the_run(capsys, monkeypatch, tmp_path):
    import sys

    from minipar.bench import collectives

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    started = []
    monkeypatch.setattr(collectives, "run_benchmark", lambda *a, **k: started.append(1))
    assert main(["bench", "collectives", "--quick", "--plot", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "needs matplotlib" in err and started == []
    # negative control: with matplotlib importable the check lets the run start
    monkeypatch.delitem(sys.modules, "matplotlib")
    monkeypatch.setattr(collectives, "run_benchmark", lambda *a, **k: started.append(1) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["bench", "collectives", "--quick", "--plot", str(tmp_path / "f.png")])
    assert started == [1]
