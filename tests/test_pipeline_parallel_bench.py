"""``minipar bench pp``: the JSON it promises, and timed stages that split B from W (checked by
counting waits, never by timing)."""

import json

import pytest
import torch

from minipar.cli import main
from minipar.pipeline_parallel import timed
from minipar.pipeline_parallel.timed import TimedStage


def test_timed_stage_splits_input_and_weight_backward(monkeypatch):
    waits = []
    monkeypatch.setattr(timed, "precise_wait", waits.append)
    st = TimedStage(1.0, 2.0, 3.0)
    x = torch.zeros(2, 3, requires_grad=True)
    y = st(x)
    assert waits == [1.0]  # forward: t_F
    torch.autograd.grad(y, [x], torch.ones_like(y), retain_graph=True)
    assert waits == [1.0, 2.0]  # B: input gradient only
    torch.autograd.grad(y, [st.w], torch.ones_like(y), retain_graph=True)
    assert waits == [1.0, 2.0, 3.0]  # W: weight gradient only
    torch.autograd.backward(y, torch.ones_like(y))
    assert sorted(waits[3:]) == [2.0, 3.0]  # a full backward: both


@pytest.mark.slow
def test_hop_latency_is_the_median_wait_and_never_negative():
    from minipar.pipeline_parallel.schedules import Action

    F, B = (lambda s, i, op=op: Action(op, s, i) for op in "FB")
    # two stages on two ranks; each received message waits 3 ms, except F1.1, whose receiver
    # started 20 µs before the sender stamped its end (the stamp follows posting the send)
    tl = [
        (0, F(0, 0), 0.000, 0.010),
        (0, F(0, 1), 0.010, 0.020),
        (1, F(1, 0), 0.013, 0.023),
        (1, F(1, 1), 0.02398, 0.030),
        (1, B(1, 0), 0.030, 0.040),
        (1, B(1, 1), 0.040, 0.050),
        (0, B(0, 0), 0.043, 0.053),
        (0, B(0, 1), 0.056, 0.066),
    ]
    # F1.1 and B0.1 are skipped (their rank was busy past the sender's end); the rest wait 3 ms
    assert timed.hop_latency(tl, 2) == pytest.approx(0.003)
    early = [(r, a, s, e) if a != F(1, 0) else (r, a, 0.00998, e) for r, a, s, e in tl]
    # F1.0's receiver now starts 20 µs before the stamp: a wait of 0, not −20 µs
    assert timed.hop_latency(early[:3], 2) == 0.0


@pytest.mark.slow
def test_bench_json_matches_its_timeline_and_the_schedule(capsys):
    from minipar.pipeline_parallel.schedules import schedule

    status = main(
        [
            "bench",
            "pp",
            "--schedule",
            "interleaved",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--chunks",
            "2",
            "--t-forward",
            "2",
            "--t-backward",
            "2",
            "--t-weight",
            "2",
            "--steps",
            "1",
            "--timeline",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    r = json.loads(out.out)  # stdout: the JSON object and nothing else
    assert (r["p"], r["m"], r["v"], r["t_forward"]) == (2, 2, 2, 0.002)
    assert r["model_bubble"] == pytest.approx(1 / 5)  # (p−1)/(v·m+p−1)
    # every rank ran exactly its actions of the schedule, in order, one at a time
    for rank, acts in enumerate(schedule("interleaved", 2, 2, 2)):
        mine = sorted((ev for ev in r["timeline"] if ev[0] == rank), key=lambda ev: ev[2])
        assert [ev[1] for ev in mine] == [str(a) for a in acts]
        assert all(a[3] <= b[2] for a, b in zip(mine, mine[1:]))
    # with one step, the reported bubble is that step's idle fraction, recomputed here
    span = max(ev[3] for ev in r["timeline"])
    idle = [1 - sum(ev[3] - ev[2] for ev in r["timeline"] if ev[0] == k) / span for k in (0, 1)]
    assert r["measured_bubble"] == pytest.approx(sum(idle) / 2)
    assert r["step_seconds"] == pytest.approx(span) and r["hop_latency"] >= 0


@pytest.mark.slow
def test_bench_rejects_bad_arguments(capsys):
    status = main(
        [
            "bench",
            "pp",
            "--schedule",
            "interleaved",
            "--pp",
            "4",
            "--microbatches",
            "6",
            "--chunks",
            "2",
        ]
    )
    out = capsys.readouterr()
    assert status == 2
    assert "microbatches m (6) to be a multiple of p (4)" in out.err
