"""What the allocator really peaks at during a step, on a GPU only (``None`` on the CPU).

``torch.cuda.max_memory_allocated`` counts every live tensor at the worst moment of the step:
model states, saved activations, and also the logits, the loss's temporaries, gradients of
activations in flight and library workspaces, none of which the formulas count.
"""

from __future__ import annotations

import torch

from minipar.runtime.device import default_device


def measurement_device() -> torch.device:
    """The launcher's device if this is a rank, else the first GPU if there is one, else the
    CPU (decided in :func:`minipar.runtime.device.default_device`)."""
    return default_device()


def peak_allocated(step, device) -> int | None:
    """Run ``step()`` and return the peak bytes allocated on a CUDA ``device`` meanwhile."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)
