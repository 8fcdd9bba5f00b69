"""The explorers' JavaScript cost models equal the Python ones (minipar.cost), run under Node.js.

Each chapter adds a test here with minipar.widgets.parity.assert_parity: the Python function,
its JavaScript twin and a grid with non-powers of two and impossible settings.
"""
import itertools

import pytest

from minipar.widgets.parity import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")

NS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 100, 0]
SIZES = [0, 1, 1000, 2**20 + 3, 1e9, -1]
LINKS = [(2e-6, 450e9), (0.0, 1e9), (3e-5, 12.5e9)]


def _collective_cases():
    from minipar.cost.collectives import ALGORITHMS, OPS
    algos = sorted({a for v in ALGORITHMS.values() for a in v})
    return [dict(op=op, algorithm=al, n=n, nbytes=s, alpha=a, bandwidth=b)
            for op, al, n, s, (a, b) in itertools.product(OPS + ("gather",), algos, NS, SIZES,
                                                           LINKS)]


def test_collective_time_parity():
    from minipar.cost.collectives import collective_time
    counts = assert_parity("collectives", "collectiveTime", collective_time, _collective_cases())
    assert counts["cases"] > 5000 and 0 < counts["errors"] < counts["cases"]


def test_busbw_and_parameter_server_parity():
    from minipar.cost.collectives import OPS, busbw, busbw_factor, parameter_server_time
    assert_parity("collectives", "busbwFactor", busbw_factor,
                  [dict(op=op, n=n) for op in OPS + ("gather",) for n in NS])
    assert_parity("collectives", "busbw", busbw,
                  [dict(op=op, n=n, nbytes=s, seconds=t) for op in OPS for n in NS[:-1]
                   for s in (1, 1e9) for t in (1e-6, 0.3, 0)])
    assert_parity("collectives", "parameterServerTime", parameter_server_time,
                  [dict(n=n, nbytes=s, alpha=a, bandwidth=b) for n in NS for s in SIZES
                   for a, b in LINKS])


def test_hierarchical_all_reduce_parity():
    from minipar.cost.collectives import hierarchical_all_reduce_time
    from minipar.cost.hardware import LINKS as PRESETS
    cases = [dict(nodes=k, gpus_per_node=g, nbytes=s, intra=PRESETS[i], inter=PRESETS[j],
                  inter_algorithm=al)
             for k in (1, 2, 3, 8, 0) for g in (1, 4, 6, 8) for s in (0, 1e6, 1e9)
             for i, j in (("nvlink4-h100", "ib-ndr400"), ("pcie5-x16", "eth-100g"))
             for al in ("ring", "recursive-doubling", "rabenseifner")]
    link = lambda L: {"alpha": L.alpha, "bandwidth": L.bandwidth}
    counts = assert_parity("collectives", "hierarchicalAllReduceTime",
                           hierarchical_all_reduce_time, cases,
                           js_args=lambda c: [c["nodes"], c["gpus_per_node"], c["nbytes"],
                                              link(c["intra"]), link(c["inter"]),
                                              c["inter_algorithm"]])
    assert counts["errors"] > 0


def test_parity_check_catches_the_classic_busbw_bug():
    """Negative control: a Python twin using (n−1)/n for all-reduce busbw (the all-gather
    factor, a classic mix-up) must be reported, with the case that differs."""
    from minipar.cost import collectives as cc

    def wrong_busbw_factor(op, n):
        return (n - 1) / n if op == "all-reduce" else cc.busbw_factor(op, n)

    with pytest.raises(AssertionError, match=r"(?s)busbwFactor .* differs .* 3 of 18 cases.*'all-reduce', 'n': 3"):
        assert_parity("collectives", "busbwFactor", wrong_busbw_factor,
                      [dict(op=op, n=n) for op in cc.OPS for n in (2, 3, 8)])


def test_parity_check_catches_a_small_relative_error():
    from minipar.cost.collectives import collective_time
    off = lambda **kw: collective_time(**kw) * (1 + 1e-7)
    with pytest.raises(AssertionError, match="relative 1.00e-07"):
        assert_parity("collectives", "collectiveTime", off,
                      [dict(op="all-reduce", algorithm="ring", n=3, nbytes=1e6, alpha=1e-6,
                            bandwidth=1e9)])


def test_collectives_explorer_default_view_and_impossible_settings():
    from minipar.widgets.collectives import MACHINE, collectives_config
    cfg = collectives_config()
    calls = [("drawExplorer", ["collectives", {}, cfg]),
             ("drawExplorer", ["collectives", {"op": "all-gather", "algorithm": "rabenseifner"}, cfg]),
             ("drawExplorer", ["collectives", {"op": "all-gather", "algorithm": "recursive-doubling", "n": 6}, cfg]),
             ("drawExplorer", ["collectives", {"n": 1}, cfg]),
             ("drawExplorer", ["collectives", {"link": MACHINE, "n": 3}, cfg])]
    (k0, default), (_, rab), (_, rd6), (_, one), (_, machine) = js_call("collectives", calls)
    assert k0 == "ok" and default["error"] is None
    assert default["html"].count("<svg") == 2 and "time (s)" in default["html"]
    assert "S (bytes)" in default["html"] and "GB/s" in default["html"]
    assert rab["error"] == ("algorithm ('rabenseifner') is not one for all-gather; choose from "
                            "ring, recursive-doubling")
    assert "minipar-explorer-message" in rab["html"] and "<svg" not in rab["html"]
    assert rd6["error"] == "recursive-doubling all-gather needs n a power of two, got n (6)"
    assert "ranks n (1)" in one["error"]
    assert machine["error"] is None and "rough default" in machine["html"]
