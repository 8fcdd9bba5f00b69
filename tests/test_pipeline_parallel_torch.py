"""torch.distributed.pipelining (PipelineStage + ScheduleGPipe, Schedule1F1B,
ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble) on gloo gives the same gradients as our
executor and as one process, float64; without scale_grads it gives m× (the control)."""

from types import SimpleNamespace

import pytest

from minipar.pipeline_parallel.torch_pipelining import torch_pipelining_grads
from minipar.pipeline_parallel.train import (
    max_error,
    small_config,
    token_batches,
    train_rank,
    train_reference,
)
from minipar.runtime.launch import run

C = small_config(L=8)
CASES = {
    2: [("gpipe", 4, 1), ("interleaved", 4, 2), ("zero-bubble", 4, 2)],
    3: [("1f1b", 3, 1), ("gpipe", 5, 1), ("interleaved", 6, 2)],
}
OURS = {"zero-bubble": "zb-h1"}


def _both(rank, p):
    out = {}
    for name, m, v in CASES[p]:
        batch = token_batches(1, 2 * m, C)
        theirs = torch_pipelining_grads(rank, p, name, m, v, C, batch[0])
        ours_name = OURS.get(name, name)
        ours = train_rank(rank, p, ours_name, m, 1 if ours_name == "zb-h1" else v, C, batch)
        out[name] = (theirs, ours.grads)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("p", [2, 3])
def test_torch_pipelining_equals_ours_and_one_process(p):
    results = run(_both, p, backend="gloo", timeout=300)
    for name, m, _v in CASES[p]:
        _, ref_grads, _ = train_reference(C, token_batches(1, 2 * m, C))
        theirs = [SimpleNamespace(grads=r[name][0]["grads"]) for r in results]
        ours = [SimpleNamespace(grads=r[name][1]) for r in results]
        assert max_error(theirs, ref_grads, "grads") < 1e-12, name
        mine = {k: g for r in ours for k, g in r.grads.items()}  # every parameter, once
        their = {k: g for r in theirs for k, g in r.grads.items()}
        assert mine.keys() == their.keys()
        assert max((mine[k] - their[k]).abs().max().item() for k in mine) < 1e-12
        # negative control: the same comparison catches an m× gradient
        scaled = [SimpleNamespace(grads={k: g * m for k, g in t.grads.items()}) for t in theirs]
        assert max_error(scaled, ref_grads, "grads") > 0.5
