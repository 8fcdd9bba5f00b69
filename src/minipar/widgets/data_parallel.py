"""Explorers for the data-parallel chapter: DP step time, and ZeRO memory per GPU."""
from __future__ import annotations

from minipar.widgets import explorer


def dp_step_figure(params_m=1300.0, ranks=64, link="ib-ndr400", bucket_mb=25.0, overlap=True,
                   compute_ms=300.0, grad_bytes=2):
    """Modelled step: compute (1/3 forward, 2/3 backward) and each bucket's all-reduce."""
    import matplotlib.pyplot as plt

    from minipar.cost.data_parallel import allreduce_seconds, dp_step_time
    if params_m <= 0 or compute_ms <= 0:
        raise ValueError(f"parameters ({params_m} M) and compute ({compute_ms} ms) must be > 0")
    if ranks < 1:
        raise ValueError(f"ranks ({ranks}) must be >= 1")
    ar = allreduce_seconds(ranks, intra="nvlink4-h100", inter=link) if ranks > 8 else \
        allreduce_seconds(ranks, intra="nvlink4-h100" if link == "ib-ndr400" else link)
    c = compute_ms / 1e3
    st = dp_step_time(c / 3, 2 * c / 3, params_m * 1e6 * grad_bytes, bucket_mb * 2**20, ar,
                      overlap)
    fig, ax = plt.subplots(figsize=(8, 2.2))
    ax.broken_barh([(0, c / 3 * 1e3), (c / 3 * 1e3, 2 * c / 3 * 1e3)], (1, 0.8),
                   color=["#9ecae1", "#3182bd"])
    ax.broken_barh([(s * 1e3, (e - s) * 1e3) for s, e in st.intervals], (0, 0.8),
                   color="#e6550d", edgecolor="w", lw=0.3)
    ax.set_yticks([0.4, 1.4], ["all-reduce", "compute"])
    ax.set_xlabel("ms")
    ax.set_title(f"{len(st.intervals)} buckets, comm {st.comm_s * 1e3:.1f} ms, exposed "
                 f"{st.exposed_s * 1e3:.1f} ms, efficiency {100 * st.efficiency:.1f}%",
                 fontsize=9)
    fig.tight_layout()
    return fig


def dp_step_explorer(show=True):
    import ipywidgets as w
    controls = {
        "params_m": w.FloatLogSlider(value=1300, base=10, min=1, max=5, description="Ψ (M)"),
        "ranks": w.BoundedIntText(value=64, min=1, max=4096, description="GPUs"),
        "link": w.Dropdown(options=["ib-ndr400", "eth-100g", "nvlink4-h100", "pcie5-x16"],
                           value="ib-ndr400", description="link"),
        "bucket_mb": w.FloatLogSlider(value=25, base=10, min=-2, max=4, description="bucket MiB"),
        "overlap": w.Checkbox(value=True, description="overlap"),
        "compute_ms": w.FloatLogSlider(value=300, base=10, min=0, max=4,
                                       description="compute ms"),
    }
    return explorer(controls, dp_step_figure, "Data-parallel step: compute vs all-reduce "
                    "(bf16 gradients; > 8 GPUs: NVLink in the node, the link across nodes)",
                    show=show)


def zero_memory_figure(params_b=7.5, d=64, optimizer="adam-mixed", gpu_gib=80.0):
    """Per-GPU model states for ZeRO 0–3 (Rajbhandari et al. 2020 Fig. 1) against GPU memory."""
    import matplotlib.pyplot as plt

    from minipar.cost.memory import model_state_bytes
    bytes_per = {"adam-mixed": (2, 2, 12), "adam-fp32": (4, 4, 8), "sgd-fp32": (4, 4, 0)}
    if optimizer not in bytes_per:
        raise ValueError(f"optimizer ({optimizer!r}) must be one of {', '.join(bytes_per)}")
    w, g, k = bytes_per[optimizer]
    fig, ax = plt.subplots(figsize=(6.5, 3))
    for s in range(4):
        m = model_state_bytes(params_b * 1e9, d=d, zero=s, weight_bytes=w, grad_bytes=g,
                              optimizer_bytes=k)
        bottom = 0
        for v, c in zip((m.weights, m.gradients, m.optimizer), ("#3182bd", "#31a354", "#e6550d")):
            ax.bar(s, v / 2**30, bottom=bottom, color=c)
            bottom += v / 2**30
        ax.text(s, bottom, f"{bottom:.1f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(gpu_gib, color="k", ls="--", lw=0.8)
    ax.set_xticks(range(4), [f"ZeRO-{s}" for s in range(4)])
    ax.set_ylabel("GiB per GPU (weights, grads, optimizer)")
    ax.set_title(f"Ψ = {params_b:g}B, d = {d}, {optimizer}; dashed: {gpu_gib:g} GiB GPU",
                 fontsize=9)
    fig.tight_layout()
    return fig


def zero_memory_explorer(show=True):
    import ipywidgets as w
    controls = {
        "params_b": w.FloatLogSlider(value=7.5, base=10, min=-1, max=3, description="Ψ (B)"),
        "d": w.Dropdown(options=[1, 2, 8, 64, 256, 1024], value=64, description="d"),
        "optimizer": w.Dropdown(options=["adam-mixed", "adam-fp32", "sgd-fp32"],
                                value="adam-mixed", description="optimizer"),
        "gpu_gib": w.FloatText(value=80.0, description="GPU GiB"),
    }
    return explorer(controls, zero_memory_figure, "ZeRO: model states per GPU", show=show)
