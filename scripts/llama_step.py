"""Llama-style training steps on this GPU, set beside what ``minipar plan`` predicts for them.

    python scripts/llama_step.py [--out llama-step.json] [--gpu-profile FILE] [--device cpu]

The H200 step files the planner was calibrated on hold GPTs only (LayerNorm, GeLU, learned
positions, dropout 0.1). This script times the other recipe: a decoder with RMSNorm, SwiGLU,
rotary positions, grouped-query attention, untied embeddings, no biases and no dropout,
vocabulary 128,256, trained the way those files were (Megatron-LM's way): bf16 parameters and
activations, each micro-batch's gradients accumulated into fp32 main gradients, a fused Adam
step on fp32 master weights, then the bf16 copy refreshed (18 bytes per parameter); PyTorch's
fused causal attention; the loss on fp32 logits. Each step is timed with CUDA events, the
median of 3 after 2 warm-ups; its peak is ``torch.cuda.max_memory_allocated()``.

Each row is priced by :func:`minipar.cost.planner.three_d.evaluate` as ``minipar plan`` would
price it on one GPU (d = t = p = 1, the row's micro-batch b and m micro-batches, no
recomputation, the "megatron" precision recipe) on the preset whose name the device's matches,
or on ``--gpu-profile`` (``minipar calibrate gpu``), and the errors are printed and written.
The rows span two token counts per micro-batch at one width and a second width, so a cost per
token and one per launch show separately. ``--device cpu`` runs tiny shapes in fp32 to check
the plumbing: its times are not a GPU's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from minipar.bench.gpu import Probe, device_timer, preset_matching
from minipar.cost.kernels.hardware import GPUS, load_gpu_profile
from minipar.cost.planner import three_d as planner

VOCAB = 128256  # Llama 3's; the CPU plumbing run uses CPU_VOCAB
CPU_VOCAB = 512
# name, layers, hidden, heads, kv heads, MLP width f, sequence, micro-batch b, micro-batches m
GPU_ROWS = [  # 1.5 B parameters at 2,048 and 8,192 tokens per micro-batch; 2.4 B at h 4096
    ("L 16, h 2048, b 1", 16, 2048, 16, 8, 8192, 2048, 1, 4),
    ("L 16, h 2048, b 4", 16, 2048, 16, 8, 8192, 2048, 4, 1),
    ("L 6, h 4096, b 2", 6, 4096, 32, 8, 14336, 2048, 2, 2),
]
CPU_ROWS = [
    ("tiny, b 1", 2, 64, 4, 2, 128, 32, 1, 2),
    ("tiny, b 4", 2, 64, 4, 2, 128, 32, 4, 1),
    ("tiny wide, b 1", 2, 128, 8, 2, 256, 32, 1, 2),
]


def rope(x, cos, sin):  # x (b, heads, s, d): rotate the two halves of each head
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, h: int, a: int, kv: int, f: int):
        super().__init__()
        self.a, self.kv, self.d = a, kv, h // a
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.qkv = nn.Linear(h, h + 2 * kv * self.d, bias=False)
        self.proj = nn.Linear(h, h, bias=False)
        self.up = nn.Linear(h, 2 * f, bias=False)  # gate and up projections, fused
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x, cos, sin):  # x (b, s, h)
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([h, self.kv * self.d, self.kv * self.d], -1)
        q = q.view(b, s, self.a, self.d).transpose(1, 2)  # (b, a, s, d)
        k = k.view(b, s, self.kv, self.d).transpose(1, 2)  # (b, kv, s, d)
        v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        o = F.scaled_dot_product_attention(
            rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True, enable_gqa=True
        )
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, h))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)  # each (b, s, f)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L: int, h: int, a: int, kv: int, f: int, s: int, vocab: int = VOCAB):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, a, kv, f) for _ in range(L))
        self.norm, self.head = nn.RMSNorm(h), nn.Linear(h, vocab, bias=False)
        d = h // a
        freq = 1.0 / 500000 ** (torch.arange(0, d, 2).float() / d)
        angle = torch.outer(torch.arange(s).float(), freq)  # (s, d/2)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, tokens):  # tokens (b, s) -> fp32 logits (b, s, V)
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        return self.head(self.norm(x)).float()


def shape_of(row, vocab: int = VOCAB) -> planner.ModelShape:
    """The row as the planner's :class:`ModelShape`, Llama's recipe."""
    name, L, h, a, kv, f, s, *_ = row
    llama = planner.SHAPE_RECIPES["llama"]
    return planner.ModelShape(L, h, a, s, vocab, name, ffn=f, kv_heads=kv, **llama)


def measure(row, device: str, vocab: int = VOCAB, repeats: int = 3, warmup: int = 2) -> dict:
    """Median step seconds and peak bytes of ``row`` trained as the module docstring says."""
    name, L, h, a, kv, f, s, b, m = row
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    model = Llama(L, h, a, kv, f, s, vocab).to(device, dtype)
    params = list(model.parameters())
    master = [p.detach().float().clone().requires_grad_(False) for p in params]
    main = [torch.zeros_like(w) for w in master]
    for w, g in zip(master, main):
        w.grad = g
    opt = torch.optim.Adam(master, lr=1e-5, fused=device.startswith("cuda"))
    data = torch.randint(0, vocab, (m, b, s + 1), device=device)

    # the flash kernel or an error, never a silent fall-back to the math kernel's s² scores
    flash = device.startswith("cuda")
    kernel = (lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)) if flash else contextlib.nullcontext

    def step():
        for i in range(m):
            with kernel():
                logits = model(data[i, :, :-1])  # (b, s, V) fp32
            F.cross_entropy(logits.view(-1, vocab), data[i, :, 1:].reshape(-1)).backward()
            for p, g in zip(params, main):
                g.add_(p.grad)  # fp32 main gradients
                p.grad = None
        opt.step()
        with torch.no_grad():
            for p, w, g in zip(params, master, main):
                p.copy_(w)
                g.zero_()

    # CUDA events around each step on a GPU, the median after warm-up (minipar calibrate gpu's clock)
    seconds = device_timer(device, repeats, warmup)(Probe("step", (b, s, h), lambda: step))
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0
    n = sum(p.numel() for p in params)
    return {
        "name": name,
        "L": L,
        "h": h,
        "a": a,
        "kv": kv,
        "f": f,
        "s": s,
        "b": b,
        "m": m,
        "params": n,
        "measured_s": seconds,
        "peak_bytes": peak,
    }


def predict(row, gpu, vocab: int = VOCAB) -> dict:
    """``minipar plan``'s step seconds and bytes for ``row`` on one ``gpu``."""
    *_, b, m = row
    cl = replace(planner.cluster(1, 1, "H200"), gpu=gpu)
    lay = planner.Layout(b * m, 1, 1, 1, b, recompute="none", zero=0)
    c = planner.evaluate(shape_of(row, vocab), cl, lay, planner.Options(precision="megatron"))
    return {"predicted_s": c.step_seconds, "predicted_bytes": c.bytes_per_gpu, "fits": c.fits}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="llama-step.json")
    ap.add_argument("--gpu-profile", help="a profile from minipar calibrate gpu")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for the plumbing check")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("llama_step: needs a CUDA GPU (--device cpu checks the plumbing)", file=sys.stderr)
        return 2
    on_gpu = args.device.startswith("cuda")
    if args.gpu_profile:
        gpu = load_gpu_profile(args.gpu_profile)
    else:
        name = torch.cuda.get_device_name() if on_gpu else "H200"
        if preset_matching(name) is None:
            raise SystemExit(f"llama_step: no preset matches {name!r}: pass --gpu-profile")
        gpu = GPUS[preset_matching(name)]
    rows = []
    vocab, runs = (
        (VOCAB, dict(repeats=3, warmup=2)) if on_gpu else (CPU_VOCAB, dict(repeats=1, warmup=1))
    )
    for row in GPU_ROWS if on_gpu else CPU_ROWS:
        r = measure(row, args.device, vocab, **runs) | predict(row, gpu, vocab) | {"gpu": gpu.name}
        r["time_error"] = 100 * (r["predicted_s"] / r["measured_s"] - 1)
        r["memory_error"] = (
            100 * (r["predicted_bytes"] / r["peak_bytes"] - 1) if r["peak_bytes"] else None
        )
        rows.append(r)
        mem = "" if r["memory_error"] is None else f", memory {r['memory_error']:+.1f} %"
        print(
            f"{r['name']}: measured {1e3 * r['measured_s']:.0f} ms, planned "
            f"{1e3 * r['predicted_s']:.0f} ms ({r['time_error']:+.1f} %){mem}"
        )
    with open(args.out, "w") as fh:
        json.dump({"device": args.device, "gpu": gpu.name, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
