"""Random streams for tensor parallelism: which dropout masks must agree across ranks, which not.

Megatron-LM ``core/tensor_parallel/random.py`` (Shoeybi et al. 2019 §3, "we maintain a separate
random number generator for dropout within model parallel regions"): the **default** stream is
seeded identically on every TP rank, since dropout on a replicated activation (after g) must
draw the same mask everywhere or the copies silently diverge; the **tensor-parallel** stream,
used inside the parallel region (attention-probability dropout on this rank's heads), is seeded
``seed + 2718 + tp_rank``, since different heads need independent masks.

    tracker = model_parallel_seed(1234, tp_rank)
    with tracker.fork():            # inside the parallel region
        probs = F.dropout(probs, 0.1)

The tracker is passed to the model, not a module-level global; it saves and restores the CPU
generator (and the current CUDA generator when the rank computes on a GPU).
"""

from __future__ import annotations

import contextlib

import torch

from minipar.runtime.device import get_device

TP_SEED_OFFSET = 2718  # Megatron's offset between the default and the tensor-parallel seed


def _get_state():
    dev = get_device()
    cuda = torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_state(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, get_device())


class RNGStatesTracker:
    """Named generator states; ``fork(name)`` runs a block on that stream and then restores the
    default one, so the default stream advances as if the block had not drawn anything."""

    def __init__(self):
        self.states: dict[str, tuple] = {}

    def add(self, name: str, seed: int) -> None:
        if name in self.states:
            raise ValueError(f"RNG state name ({name!r}) must be new; it is already tracked")
        outer = _get_state()
        torch.manual_seed(seed)
        self.states[name] = _get_state()
        _set_state(outer)

    @contextlib.contextmanager
    def fork(self, name: str = "tensor-parallel"):
        if name not in self.states:
            raise KeyError(
                f"RNG state name ({name!r}) must be added first; have {list(self.states)}"
            )
        outer = _get_state()
        _set_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = _get_state()
            _set_state(outer)


def model_parallel_seed(
    seed: int, tp_rank: int, *, tp_offset: int = TP_SEED_OFFSET
) -> RNGStatesTracker:
    """Seed the default stream with ``seed`` (same on all TP ranks) and return a tracker whose
    "tensor-parallel" stream is seeded ``seed + tp_offset + tp_rank`` (different per rank).
    ``tp_offset`` exists for the negative control: pass a per-rank-equal seed to see the bug."""
    torch.manual_seed(seed)
    tracker = RNGStatesTracker()
    tracker.add("tensor-parallel", seed + tp_offset + tp_rank)
    return tracker
