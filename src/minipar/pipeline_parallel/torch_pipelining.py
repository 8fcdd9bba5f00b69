"""The same stages through PyTorch's ``torch.distributed.pipelining``, for comparison.

``PipelineStage`` wraps each of our :class:`GPTStage` modules; ``ScheduleGPipe``,
``Schedule1F1B``, ``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble`` (stage s on
rank s mod p, as ours) run them with ``scale_grads=True`` (our 1/m loss scaling). PyTorch does
not know that the first and last stage share the tied embedding, so we all-reduce its gradient
after ``step``. Needs torch >= 2.8 (its P2P batching could deadlock on gloo before) and numpy.
Stages and batch live on the rank's device (PyTorch allocates its receive buffers there and
NCCL moves only GPU tensors); the gradients are copied to the CPU once every message arrived.
"""

from __future__ import annotations

import torch.nn.functional as F

from minipar.runtime.device import get_device

from .communication import all_reduce_tied_gradient
from .stage import build_stages
from .train import embedding_group

TORCH_SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved": "ScheduleInterleaved1F1B",
    "zero-bubble": "ScheduleInterleavedZeroBubble",
}


def _loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (b·s, V) vs (b·s,)


def torch_pipelining_grads(rank: int, p: int, name: str, m: int, v: int, c, batch) -> dict:
    """One step of PyTorch's schedule ``name`` on rank ``rank``; the gradients by reference name
    and the mean loss (last stage)."""
    from torch.distributed import pipelining  # noqa: PLC0415 (lazy: torch)

    dev = get_device()
    stages = {s: st.to(dev) for s, st in build_stages(c, rank, p, v).items()}
    last = v * p - 1
    pstages = [pipelining.PipelineStage(stages[s], s, v * p, dev) for s in sorted(stages)]
    cls = getattr(pipelining, TORCH_SCHEDULES[name])
    sched = cls(pstages[0] if v == 1 else pstages, m, loss_fn=_loss, scale_grads=True)
    x, y = (t.to(dev) for t in batch)  # tokens (m·b, s), targets (m·b, s)
    losses: list = []
    kwargs = {"target": y, "losses": losses} if last in stages else {}
    if 0 in stages:
        sched.step(x, **kwargs)
    else:
        sched.step(**kwargs)
    holder = stages.get(0) or stages.get(last)
    all_reduce_tied_gradient(holder.tied_weight() if holder else None, embedding_group(p))
    grads = {  # step() has returned: every message is here
        n: q.grad.detach().to("cpu", copy=True)
        for st in stages.values()
        for n, q in st.reference_names().items()
        if q.grad is not None
    }
    loss = sum(l.item() for l in losses) / m if losses else None
    return {"grads": grads, "loss": loss}
