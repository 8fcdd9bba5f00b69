"""The collectives explorer's op and algorithm menus change together, so no choice of one leaves
the other invalid (the default algorithm, ring, is not one for broadcast, reduce or all-to-all)."""

from __future__ import annotations

import pytest
from explorer_parity_support import js_call, node_available

from minipar.cost.network.collectives import ALGORITHMS, OPS
from minipar.widgets.collectives import collectives_config

pytestmark = pytest.mark.skipif(
    not node_available(), reason="Node.js (/usr/bin/node) not installed"
)


def test_op_and_algorithm_change_together():
    cases = [
        ({"op": "broadcast", "algorithm": "ring"}, "op", {"algorithm": "binomial-tree"}),
        ({"op": "all-to-all", "algorithm": "ring"}, "op", {"algorithm": "pairwise-exchange"}),
        ({"op": "reduce", "algorithm": "binomial-tree"}, "op", {}),  # valid: kept
        ({"op": "broadcast", "algorithm": "ring"}, "algorithm", {"op": "all-reduce"}),
        ({"op": "all-reduce", "algorithm": "scatter-allgather"}, "algorithm", {"op": "broadcast"}),
        (
            {"op": "all-gather", "algorithm": "recursive-halving"},
            "algorithm",
            {"op": "reduce-scatter"},
        ),
        ({"op": "all-reduce", "algorithm": "ring"}, "n", {}),
    ]
    got = js_call("collectives", [("collectivesLink", [v, ch]) for v, ch, _ in cases])
    assert [out for _, out in got] == [want for *_, want in cases]


def test_every_op_and_every_algorithm_choice_draws():
    """From the default (all-reduce, ring), choosing any op, or any algorithm, then linking,
    draws a figure: the explorer never shows 'is not one for' after a single change."""
    config = collectives_config()
    algorithms = sorted({a for v in ALGORITHMS.values() for a in v})
    starts = [("op", {"op": op, "algorithm": "ring"}) for op in OPS]
    starts += [("algorithm", {"op": "all-reduce", "algorithm": a}) for a in algorithms]
    links = js_call("collectives", [("collectivesLink", [v, ch]) for ch, v in starts])
    values = [{**v, **out} for (_, v), (_, out) in zip(starts, links)]
    assert all(v["algorithm"] in ALGORITHMS[v["op"]] for v in values), values
    drawn = js_call("collectives", [("drawExplorer", ["collectives", v, config]) for v in values])
    assert all(out["error"] is None for _, out in drawn), [o["error"] for _, o in drawn]


def test_without_the_link_a_single_change_errors():
    """Negative control: the same changes, unlinked, hit the 'is not one for' message."""
    ((_, out),) = js_call(
        "collectives",
        [
            (
                "drawExplorer",
                ["collectives", {"op": "broadcast", "algorithm": "ring"}, collectives_config()],
            )
        ],
    )
    assert "is not one for broadcast" in out["error"]
