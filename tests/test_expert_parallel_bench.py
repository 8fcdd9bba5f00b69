"""``minipar bench expert_parallel``: its JSON is consistent with itself and with the cost
model (every collective's bytes traced = model from the routed counts, imbalance ratios = the
reported counts and times, prediction = the reported fit); bad input exits 2 naming the rule
and the value. Never a speed assertion."""

import json

import pytest

from minipar.cli import main


@pytest.mark.slow
def test_bench_ep_json_is_consistent(capsys):
    x, n, E, K, h = 2, 16, 4, 1, 8
    status = main(
        [
            "bench",
            "ep",
            "--ranks",
            str(x),
            "--tokens",
            str(n),
            "--experts",
            str(E),
            "--hidden",
            str(h),
            "--ffn",
            "8",
            "--steps",
            "1",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    r = json.loads(out.out)  # stdout: the JSON object and nothing else
    assert (r["ranks"], r["tokens_per_rank"], r["experts"], r["top_k"]) == (x, n, E, K)
    t = r["step_seconds"]
    assert set(t) == set(r["routers"]) == {"even", "skewed"} and min(t.values()) > 0
    assert r["skewed_to_even"] == pytest.approx(t["skewed"] / t["even"])
    fit = r["fit"]
    for name, g in r["routers"].items():
        assert t[name] == max(g["per_rank_step_seconds"])  # one round: its slowest rank
        # counts: every assignment routed somewhere (no capacity), rows per rank = its experts'
        assert sum(g["tokens_per_expert"]) == x * n * K
        assert g["rows_per_rank"] == [
            sum(g["tokens_per_expert"][i * E // x : (i + 1) * E // x]) for i in range(x)
        ]
        assert [sum(col) for col in zip(*g["rows"])] == g["rows_per_rank"]
        assert all(sum(row) == n * K for row in g["rows"])  # each rank sends its K·n rows
        rows = g["rows_per_rank"]
        assert g["counted_imbalance"] == pytest.approx(max(rows) / (sum(rows) / x))
        secs = g["expert_seconds"]
        assert len(secs) == x and min(secs) >= 0
        assert g["measured_imbalance"] == pytest.approx(max(secs) / (sum(secs) / x))
        # bytes, from the counts written out here: counts (E int64), then four token all-to-alls
        for rank in range(x):
            sent = sum(g["rows"][rank]) * h * 4
            got = sum(row[rank] for row in g["rows"]) * h * 4
            assert g["bytes"]["traced_per_rank"][rank] == E * 8 + 2 * sent + 2 * got
        assert g["bytes"]["traced_per_rank"] == g["bytes"]["model_per_rank"] and g["bytes"]["equal"]
        if fit["bandwidth"]:
            worst = max(max(sum(g["rows"][s]), sum(row[s] for row in g["rows"])) for s in range(x))
            one = (x - 1) * fit["alpha"] + (x - 1) / x * worst * h * 4 / fit["bandwidth"]
            assert g["predicted_a2a_seconds"] == pytest.approx(4 * one)
        else:
            assert g["predicted_a2a_seconds"] is None and fit["error"]
    # loop vs grouped kernels: measured in this run, reported as ratios of the reported times
    k = r["kernels"]
    assert k["rows"] == x * n * K and k["loop"] > 0 and k["padded"] > 0
    assert k["loop_over_padded"] == pytest.approx(k["loop"] / k["padded"])
    if k["grouped_mm"]:
        assert k["loop_over_grouped_mm"] == pytest.approx(k["loop"] / k["grouped_mm"])
    # control: the skewed run's traffic is not what even routing would predict (E·8 bytes of
    # counts + four all-to-alls of K·n rows): the model has to use the routed counts
    even_model = E * 8 + 4 * K * n * h * 4
    assert r["routers"]["skewed"]["bytes"]["traced_per_rank"] != [even_model] * x
    # the skewed router is skewed: expert 0 takes more than its even share (counted, not timed)
    assert r["routers"]["skewed"]["tokens_per_expert"][0] > x * n * K / E
    assert r["routers"]["skewed"]["counted_imbalance"] > r["routers"]["even"]["counted_imbalance"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ranks", "3", "--experts", "4"], "--ranks (3) must divide --experts (4)"),
        (
            ["--ranks", "2", "--experts", "4", "--top-k", "5"],
            "--top-k (5) must be <= --experts (4)",
        ),
        (["--ranks", "2", "--skew", "0"], "--skew (0.0) must be > 0"),
        (["--ranks", "2", "--grouped-experts", "0"], "--grouped-experts (0) must be >= 1"),
    ],
)
def test_bench_ep_rejects_bad_input(capsys, argv, message):
    assert main(["bench", "expert_parallel", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
