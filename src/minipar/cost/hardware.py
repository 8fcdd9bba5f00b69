"""Links and GPUs the course's cost examples use, each number with its source.

Bandwidth is bytes/s PER DIRECTION (what one ring step can use). Vendors often quote the
bidirectional sum; ``Link.note`` records the conversion. The α values are NOT measured: they
are order-of-magnitude assumptions for one message's start-up cost through NCCL on that link
(a few µs in a node, more across nodes, tens of µs over TCP). Measure your own with
``minipar bench collectives`` and :func:`minipar.cost.collectives.fit_alpha_beta`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .units import GB


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s per direction
    alpha: float      # s per message (assumed, see module docstring)
    source: str
    note: str = ""


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: float
    peak_flops: dict[str, float] = field(hash=False)  # dtype -> dense FLOP/s (no 2:4 sparsity)
    source: str = ""
    note: str = ""
    hbm_bandwidth: float = 2.0e12   # bytes/s of HBM (datasheet)
    sms: int = 108                  # streaming multiprocessors (tile waves, compute.py)
    gemm_efficiency: float = 0.75   # η: fraction of dense peak a large GEMM sustains in training
    intra: str = "nvlink3-a100"     # the NVLink of its generation (DGX/HGX baseboard)
    inter: str = "ib-hdr200"        # the InfiniBand NIC per GPU of its generation


LINKS: dict[str, Link] = {
    "nvlink3-a100": Link(
        "nvlink3-a100", 300 * GB, 2e-6,
        source="NVIDIA A100 Tensor Core GPU datasheet: NVLink 600 GB/s (12 NVLink-3 links)",
        note="600 GB/s is the bidirectional total = 300 GB/s per direction (DGX A100, HGX A100)."),
    "nvlink4-h100": Link(
        "nvlink4-h100", 450 * GB, 2e-6,
        source="NVIDIA H100 Tensor Core GPU datasheet: NVLink 900 GB/s (18 NVLink-4 links)",
        note="900 GB/s is the bidirectional total = 450 GB/s per direction. 'What Is Tensor "
             "Parallelism? Multi-GPU Training Explained' quotes the 900 GB/s bidirectional "
             "figure correctly; a ring step can use 450."),
    "pcie5-x16": Link(
        "pcie5-x16", 32e9 * 16 * (128 / 130) / 8, 5e-6,
        source="PCI-SIG PCIe 5.0 base spec: 32 GT/s per lane, 128b/130b encoding",
        note="32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s per direction (≈64 GB/s as usually "
             "quoted), ≈126 GB/s bidirectional; NVIDIA's '128 GB/s' is that bidirectional sum. "
             "'What Is Tensor Parallelism? Multi-GPU Training Explained' calls ~64 GB/s "
             "'bidirectional': it is per direction. Measured "
             "GPU-to-GPU copies reach roughly 50 GB/s."),
    "ib-ndr400": Link(
        "ib-ndr400", 400e9 / 8, 5e-6,
        source="InfiniBand Trade Association / NVIDIA ConnectX-7: NDR 400 Gb/s per port",
        note="400 Gb/s data rate per direction = 50 GB/s per direction (100 GB/s both ways)."),
    "ib-hdr200": Link(
        "ib-hdr200", 200e9 / 8, 5e-6,
        source="NVIDIA DGX A100 User Guide: 8 ConnectX-6 HDR 200 Gb/s compute NICs, one per GPU",
        note="200 Gb/s per direction = 25 GB/s per GPU per direction (rail-optimised)."),
    "opa-jean-zay": Link(
        "opa-jean-zay", 4 * 100e9 / 8 / 8, 5e-6,
        source="IDRIS, Jean Zay hardware: A100 nodes with 4 Omni-Path 100 Gb/s NICs per "
               "8-GPU node (BigScience 2022, BLOOM paper §3.4)",
        note="4 × 100 Gb/s shared by 8 GPUs = 50 GB/s per node = 6.25 GB/s per GPU per "
             "direction: a quarter of a DGX A100's 25 GB/s HDR per GPU."),
    "eth-100g": Link(
        "eth-100g", 100e9 / 8, 30e-6,
        source="IEEE 802.3 100 Gigabit Ethernet",
        note="100 Gb/s per direction = 12.5 GB/s per direction; α assumes TCP sockets."),
}

# Dense (no 2:4 structured sparsity) peak FLOP/s: datasheets print sparse numbers with an
# asterisk, twice these. "GB" of HBM on NVIDIA datasheets is binary here (80 GB = 5 x 16 GiB
# stacks); the driver keeps a little back, so torch reports slightly less as total memory.
_T = 1e12

A100_GEMM_EFFICIENCY = 0.78
"""η for A100: the fraction of the 312 TFLOP/s dense peak that the large fp16/bf16 GEMMs of
training sustain (clocks under the 400 W power cap, NCCL kernels sharing the SMs). Set ONCE for
the A100 generation, not per run; :mod:`minipar.cost.validation` then checks every published
A100 run against it (Narayanan et al. 2021 Table 1, MT-NLG, BLOOM)."""

H100_GEMM_EFFICIENCY = 0.70
"""η for H100/H200 (an ASSUMPTION, not validated against a published run in this course): dense
bf16 GEMMs of training shapes reach about 650-700 of the 989 TFLOP/s peak."""

GPUS: dict[str, GPU] = {
    "A100-80GB": GPU("A100-80GB", 80 * 2**30,
                     {"fp64": 19.5 * _T, "fp32": 19.5 * _T, "tf32": 156 * _T, "bf16": 312 * _T,
                      "fp16": 312 * _T},
                     source="NVIDIA A100 Tensor Core GPU datasheet (SXM, dense)",
                     note="fp64 is the FP64 Tensor Core figure; tf32/bf16/fp16 dense = half "
                          "the datasheet's sparsity numbers (312/624/624). HBM2e 2,039 GB/s, "
                          "108 SMs; NVLink 3 (300 GB/s per direction) and one HDR 200 Gb/s "
                          "NIC per GPU in a DGX A100.",
                     hbm_bandwidth=2039e9, sms=108, gemm_efficiency=A100_GEMM_EFFICIENCY,
                     intra="nvlink3-a100", inter="ib-hdr200"),
    "H100-SXM": GPU("H100-SXM", 80 * 2**30,
                    {"fp64": 66.9 * _T, "fp32": 66.9 * _T, "tf32": 494.7 * _T,
                     "bf16": 989.4 * _T, "fp16": 989.4 * _T, "fp8": 1978.9 * _T},
                    source="NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense)",
                    note="datasheet prints 989 TF32 / 1979 BF16 / 3958 FP8 'with sparsity'; "
                         "dense is half. HBM3 3.35 TB/s, 132 SMs; NVLink 4 (450 GB/s per "
                         "direction), one NDR 400 Gb/s NIC per GPU in a DGX H100.",
                    hbm_bandwidth=3.35e12, sms=132, gemm_efficiency=H100_GEMM_EFFICIENCY,
                    intra="nvlink4-h100", inter="ib-ndr400"),
    "H200": GPU("H200", 141 * 2**30,
                {"fp64": 66.9 * _T, "fp32": 66.9 * _T, "tf32": 494.7 * _T,
                 "bf16": 989.4 * _T, "fp16": 989.4 * _T, "fp8": 1978.9 * _T},
                source="NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)",
                note="same GH100 compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s; NVLink 4 "
                     "and NDR 400 as in a DGX H100 (HGX H200).",
                hbm_bandwidth=4.8e12, sms=132, gemm_efficiency=H100_GEMM_EFFICIENCY,
                intra="nvlink4-h100", inter="ib-ndr400"),
}


def link(name: str) -> Link:
    """The :class:`Link` called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in LINKS:
        raise ValueError(f"link ({name!r}) must be one of {', '.join(LINKS)}")
    return LINKS[name]


def gpu(name: str) -> GPU:
    """The :class:`GPU` called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in GPUS:
        raise ValueError(f"gpu ({name!r}) must be one of {', '.join(GPUS)}")
    return GPUS[name]
