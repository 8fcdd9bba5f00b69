"""Our ring attention against PyTorch's ``torch.distributed.tensor.experimental.context_parallel``.

``context_parallel(mesh, buffers, buffer_seq_dims)`` shards the buffers along the sequence in
place (head-tail, i.e. zigzag, order when load balancing is on) and, inside the context, replaces
``F.scaled_dot_product_attention`` by its ring version. That replacement covers the CUDA
kernels only (``_scaled_dot_product_flash_attention``, ``_efficient_attention``,
``_cudnn_attention`` in ``_context_parallel/_attention.py``); on the CPU, SDPA dispatches to
``_scaled_dot_product_flash_attention_for_cpu``, which has no ring handler, so the comparison
needs NCCL and one GPU per rank (:func:`compare_on_rank`, run by a ``gpu``-marked test).
:func:`cpu_attempt_on_rank` records what happens on gloo/CPU, so the chapter can quote it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributed import device_mesh

from minipar.runtime.device import get_device

from .experiments import qkv, rel_diff
from .online_softmax import full_attention
from .ring import ring_attention
from .sharding import gather_sequence, shard_sequence


def _theirs(q, k, v, cp, device):
    from torch.distributed.tensor.experimental import context_parallel  # noqa: PLC0415 (lazy: dtensor)
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard  # noqa: PLC0415 (lazy: dtensor)

    mesh = device_mesh.init_device_mesh(device.type, (cp,), mesh_dim_names=("cp",))
    q, k, v = (t.clone() for t in (q, k, v))
    with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # this rank's shard
    (full,) = context_parallel_unshard(mesh, [out], [2])
    return full


def compare_on_rank(rank, cp, dtype=torch.bfloat16):
    """Relative max difference of the full causal output: ours (zigzag ring) vs torch's, and
    both vs one-process attention in float64."""
    device = get_device()
    q, k, v = (t.to(device) for t in qkv(b=1, a=4, s=64 * cp, d=64, logit=30))
    ref = full_attention(q, k, v, causal=True)  # float64
    low = [t.to(dtype) for t in (q, k, v)]
    theirs = _theirs(*low, cp, device).double()
    shards = [shard_sequence(t, 2, None, "zigzag") for t in low]
    ours = gather_sequence(
        ring_attention(*shards, True, None, "zigzag"), 2, None, "zigzag"
    ).double()
    return {
        "ours-theirs": rel_diff(ours, theirs),
        "ours-full": rel_diff(ours, ref),
        "theirs-full": rel_diff(theirs, ref),
    }


def cpu_attempt_on_rank(rank, cp):
    """Try torch's context_parallel on this rank's device; return the error text, or "ran"."""
    q, k, v = qkv(b=1, a=2, s=8 * cp, d=8, dtype=torch.float32)
    try:
        _theirs(q, k, v, cp, torch.device("cpu"))
    except Exception as e:  # we report what torch says
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return "ran"
