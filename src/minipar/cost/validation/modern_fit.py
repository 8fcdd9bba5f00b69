"""The three constants set on the calibration rows of ``published_modern.json``
(:data:`minipar.cost.validation.modern.CALIBRATION`), one row each, in this order, each holding
the ones before it:

    POWER_500W           (:mod:`minipar.cost.kernels.hardware`) the 500 W HBM2e H100's tensor-core
                         rate over the SXM's, on torchtitan's Llama 3.1 8B, 8 GPUs, bf16, eager;
    COMPILED_TRAFFIC     (:mod:`minipar.cost.kernels.compute`) κ, the element-wise bytes left
                         after fusion, on the same run compiled (torch.compile);
    FP8_GEMM_EFFICIENCY  (:mod:`minipar.cost.kernels.compute`) ρ, on the same run compiled with
                         torchao Float8 (tensorwise dynamic scaling).

Each row's predicted step time is monotonic in its constant, so each fit is the root of
predicted/measured − 1, found by bisection and rounded to two decimals (as the presets are).
No validation row enters. ``tests/test_cost_modern_validation.py`` holds the presets to this
fit."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from ..kernels import compute as C
from ..kernels import hardware as H
from . import modern

RANGES = {
    "POWER_500W": (0.3, 1.2),
    "COMPILED_TRAFFIC": (0.01, 2.0),
    "FP8_GEMM_EFFICIENCY": (0.2, 2.0),
}


def gpu_500w(power: float):
    """The 500 W preset with both peaks at ``power`` × the SXM's."""
    g = H.GPUS["H100-HBM2e-500W"]
    sxm = H.GPUS["H100-SXM"].peak_flops
    return replace(g, peak_flops={k: power * sxm[k] for k in g.peak_flops})


@contextmanager
def _constants(**kw):
    """The compute module's constants set to ``kw`` for the duration (the fit's trial values)."""
    old = {k: getattr(C, k) for k in kw}
    try:
        for k, v in kw.items():
            setattr(C, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(C, k, v)


def _error(row_id: str, power: float, **constants) -> float:
    row = next(r for r in modern.load()["rows"] if r["id"] == row_id)
    with _constants(**constants):
        e = modern.evaluate_row(row, gpu_500w(power))
    return e["predicted_s"] / e["measured_s"] - 1


def _root(f, lo: float, hi: float, increasing: bool) -> float:
    for _ in range(40):
        mid = (lo + hi) / 2
        if (f(mid) > 0) == increasing:
            hi = mid
        else:
            lo = mid
    return round((lo + hi) / 2, 2)


def fit() -> dict:
    """The three constants, each fitted on its row (module docstring), rounded."""
    rows = {v: k for k, v in modern.CALIBRATION.items()}
    power = _root(lambda x: _error(rows["POWER_500W"], x), *RANGES["POWER_500W"], False)
    kappa = _root(
        lambda x: _error(rows["COMPILED_TRAFFIC"], power, COMPILED_TRAFFIC=x),
        *RANGES["COMPILED_TRAFFIC"],
        True,
    )
    rho = _root(
        lambda x: _error(
            rows["FP8_GEMM_EFFICIENCY"], power, COMPILED_TRAFFIC=kappa, FP8_GEMM_EFFICIENCY=x
        ),
        *RANGES["FP8_GEMM_EFFICIENCY"],
        False,
    )
    return {"POWER_500W": power, "COMPILED_TRAFFIC": kappa, "FP8_GEMM_EFFICIENCY": rho}


if __name__ == "__main__":
    print(fit())
