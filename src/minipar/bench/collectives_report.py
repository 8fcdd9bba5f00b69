"""Text table of a ``minipar bench collectives`` result, measured vs α-β (its figure:
:func:`minipar.plotting.collectives.draw_benchmark`)."""

from __future__ import annotations

from minipar.cost.units import fmt_bytes, fmt_seconds


def table(result: dict) -> str:
    """Measured points, fitted α/β per (op, n), and the ring-vs-dist ratios, as text."""
    m = result.get("machine", {})
    where = f"{m.get('backend', '?')} on " + (
        m["gpu"] if m.get("gpu") else f"{m.get('cpu_count', '?')} CPU cores"
    )
    lines = [
        f"backend: {where}, {m.get('dtype', 'float32')}",
        f"{'op':<15}{'n':>3}{'size':>12}{'time':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}",
    ]
    for r in result["results"]:
        lines.append(
            f"{r['op']:<15}{r['n']:>3}{fmt_bytes(r['bytes']):>12}"
            f"{fmt_seconds(r['seconds']):>12}{r['algbw'] / 1e9:>12.3f}"
            f"{r['busbw'] / 1e9:>12.3f}"
        )
    lines += ["", "fitted α-β model (bandwidth per direction, GB = 1e9 bytes):"]
    for f in result["fits"]:
        what = (
            f"α = {fmt_seconds(f['alpha'])}, bandwidth = {f['bandwidth'] / 1e9:.3f} GB/s"
            if f["error"] is None
            else f"no fit: {f['error']}"
        )
        lines.append(f"  {f['op']:<15} n={f['n']}  ({f['algorithm']})  {what}")
    if result.get("ring_vs_dist"):
        lines += ["", "minipar ring_all_reduce vs dist.all_reduce (ratio > 1: ours slower):"]
        for r in result["ring_vs_dist"]:
            lines.append(
                f"  n={r['n']} {fmt_bytes(r['bytes']):>10}: ring "
                f"{fmt_seconds(r['ring_seconds'])}, dist {fmt_seconds(r['dist_seconds'])}"
                f", ratio {r['ratio']:.2f}"
            )
    lines += [
        "",
        "algbw = S/t; busbw = algbw × busbw factor (nccl-tests), comparable to a "
        "link's per-direction bandwidth.",
    ]
    return "\n".join(lines)
