"""``minipar bench context_parallel``: its JSON is consistent with itself and with the cost
model (bytes traced = model, ratios = the reported times, predictions = the reported fit); bad
input exits 2 naming the rule and the value. Never a speed assertion."""

import json

import pytest

from minipar.cli import main

VARIANTS = {"one_process", "ring/contiguous", "ring/zigzag", "ulysses"}


@pytest.mark.slow
def test_bench_cp_json_is_consistent(capsys):
    status = main(
        [
            "bench",
            "cp",
            "--ranks",
            "2",
            "--seq",
            "8",
            "--heads",
            "2",
            "--head-dim",
            "4",
            "--steps",
            "1",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    r = json.loads(out.out)  # stdout: the JSON object and nothing else
    cp, b, s, h, e = 2, 1, 8, 2 * 4, 4
    assert (r["ranks"], r["s"], r["a"], r["d"], r["h"]) == (cp, s, 2, 4, h)
    t, per = r["step_seconds"], r["per_rank_seconds"]
    assert set(t) == set(per) == VARIANTS and min(t.values()) > 0
    assert len(per["one_process"]) == 1
    assert all(len(per[v]) == cp for v in VARIANTS - {"one_process"})
    for v in VARIANTS - {"one_process"}:  # one round: the slowest rank is that round's
        assert t[v] == max(per[v])
        assert r["speedup_vs_one_process"][v] == pytest.approx(t["one_process"] / t[v])
    assert r["contiguous_to_zigzag"] == pytest.approx(t["ring/contiguous"] / t["ring/zigzag"])
    assert r["model_imbalance_contiguous"] == pytest.approx(2 * cp / (cp + 1))
    # bytes, from the formulas written out here: K/V block 2·b·(s/cp)·h·e
    kv = 2 * b * (s // cp) * h * e
    ring = (cp - 1) * kv + (cp - 1) * kv + cp * kv  # forward K/V; backward K/V + dK/dV
    assert r["kv_block_bytes"] == kv
    # control: a model that forgets the dK/dV accumulator's cp sends would not match the trace
    assert r["bytes"]["ring/zigzag"]["traced_per_rank"][0] != 2 * (cp - 1) * kv
    for lay in ("contiguous", "zigzag"):
        x = r["bytes"][f"ring/{lay}"]
        assert x["traced_per_rank"] == [ring] * cp and x["model"] == ring and x["equal"]
        assert x["traced_messages_per_rank"] == [(cp - 1) + (2 * cp - 1)] * cp
    S = b * (s // cp) * h * e  # q (or the output) per all-to-all
    u = r["bytes"]["ulysses"]
    assert u["traced_per_rank"] == [8 * S] * cp and u["model"] == 8 * S and u["equal"]
    assert u["traced_messages_per_rank"] == [4] * cp  # packed QKV + output, each way
    assert u["model_leaving_rank"] == 8 * S * (cp - 1) / cp
    # predictions follow from the reported fit (none when the noise made the fit meaningless)
    fit, p = r["fit"], r["predicted_comm_seconds"]
    n_sizes = len(fit["sizes"])
    assert n_sizes == len(fit["ring_shift"]["seconds"]) == len(fit["all_to_all"]["seconds"])
    ring_fit, a2a_fit = fit["ring_shift"], fit["all_to_all"]
    if ring_fit["bandwidth"]:
        per_msg = ring_fit["alpha"] + kv / ring_fit["bandwidth"]
        assert p["ring/zigzag"] == p["ring/contiguous"] == pytest.approx(4 * per_msg)
    else:
        assert p["ring/contiguous"] is None and ring_fit["error"]
    if a2a_fit["bandwidth"]:
        # four all-to-alls (packed QKV of 3S, output of S; forward and backward): 4 α-terms
        alpha = (cp - 1) * a2a_fit["alpha"]
        assert p["ulysses"] == pytest.approx(
            4 * alpha + 8 * (cp - 1) / cp * S / a2a_fit["bandwidth"]
        )
    else:
        assert p["ulysses"] is None and a2a_fit["error"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ranks", "3", "--heads", "4", "--seq", "12"], "--ranks (3) must divide --heads (4)"),
        (
            ["--ranks", "2", "--heads", "2", "--seq", "6"],
            "--seq (6) must be divisible by 2·ranks (4)",
        ),
        (["--ranks", "1"], "--ranks (1) must be >= 2"),
    ],
)
def test_bench_cp_rejects_bad_input(capsys, argv, message):
    assert main(["bench", "context_parallel", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
