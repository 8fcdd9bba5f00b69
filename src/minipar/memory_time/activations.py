"""Bytes autograd keeps for the backward pass, measured with ``saved_tensors_hooks``.

Every tensor an operation saves for its backward passes through the pack hook. We count each
underlying storage once (views such as Q, K and V of one QKV output share one storage; a
tensor saved by two operations is one allocation) and skip the parameters' storages (weights
are model state, not activations). This is what Korthikanti et al. 2022 §4 count by hand.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch


@dataclass
class SavedBytes:
    total: int = 0
    by_dtype: Counter = field(default_factory=Counter)  # "bfloat16" -> bytes
    by_shape: Counter = field(default_factory=Counter)  # (shape, dtype) -> bytes
    storages: set = field(default_factory=set, repr=False)


def saved_bytes(fn, *args, exclude=()) -> SavedBytes:
    """Run ``fn(*args)`` and count the bytes of the distinct storages it saves for backward,
    but those of ``exclude`` (the parameters); the graph lives as long as ``result``."""
    seen = {t.untyped_storage().data_ptr() for t in exclude}
    out = SavedBytes()

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            out.total += st.nbytes()
            out.by_dtype[str(t.dtype).removeprefix("torch.")] += st.nbytes()
            out.by_shape[(tuple(t.shape), str(t.dtype).removeprefix("torch."))] += st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn(*args)
    out.result = result
    return out


def layer_activation_bytes(model, b: int, *, dtype=None) -> SavedBytes:
    """Saved bytes of ``model.layers`` (a GPT from :mod:`minipar.model`) on one
    micro-batch of b sequences, embeddings and output layer left out as in Korthikanti §4."""
    c, p = model.c, next(model.parameters())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, c.s, c.h, generator=g).to(device=p.device, dtype=dtype or p.dtype)
    x.requires_grad_(True)  # (b, s, h) first layer's input

    def stack(x):
        for layer in model.layers:
            x = layer(x)
        return x

    model.train()
    out = saved_bytes(stack, x, exclude=list(model.parameters()))
    out.result.float().sum().backward()  # the saved tensors were usable
    del out.result
    return out


def expected_items(
    s: int,
    b: int,
    h: int,
    a: int,
    *,
    act_bytes: float = 2,
    mask_bytes: float = 1,
    stats_bytes: float = 0,
    recompute: str = "none",
) -> dict[str, float]:
    """Korthikanti et al. 2022 §4.1, item by item, for one layer without tensor parallelism.
    With the paper's assumptions (the defaults: 16-bit activations, 1-byte dropout masks, the
    layer norms' mean and 1/std ignored) they add up to Table 2: sbh(34 + 5as/h), 34sbh with
    selective and 2sbh with full recomputation; :func:`device_conventions` gives real ones."""
    sbh, e, mu = s * b * h, act_bytes, mask_bytes
    if recompute == "full":
        return {"layer input (recomputation checkpoint)": sbh * e}
    items = {
        "layer-norm inputs (2)": 2 * sbh * e,
        "layer-norm mean and 1/std (2 × 2)": 4 * s * b * stats_bytes,
        "QKV-linear input": sbh * e,
        "Q, K, V": 3 * sbh * e,
        "softmax output": a * s * s * b * e,
        "attention dropout mask": a * s * s * b * mu,
        "attention dropout output": a * s * s * b * e,
        "projection input": sbh * e,
        "dropout masks after projection and MLP (2)": 2 * sbh * mu,
        "h→4h input": sbh * e,
        "GeLU input": 4 * sbh * e,
        "4h→h input (GeLU output)": 4 * sbh * e,
    }
    if recompute == "selective":  # softmax(QKᵀ)·V is re-run: only Q, K, V were kept
        for k in ("softmax output", "attention dropout mask", "attention dropout output"):
            del items[k]
    elif recompute != "none":
        raise ValueError(f"recompute ({recompute!r}) must be none, selective or full")
    return items


def device_conventions(device, dtype) -> dict[str, int]:
    """Bytes per element PyTorch really uses for the items of :func:`expected_items`: CUDA's
    fused dropout keeps a 1-byte mask and layer norm fp32 statistics; on the CPU both are in
    x's dtype (dropout is ``x * mask``)."""
    e = torch.empty((), dtype=dtype).element_size()
    if torch.device(device).type == "cuda":
        return {"act_bytes": e, "mask_bytes": 1, "stats_bytes": 4}
    return {"act_bytes": e, "mask_bytes": e, "stats_bytes": e}
