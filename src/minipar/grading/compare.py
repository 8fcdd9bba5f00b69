"""Comparisons checkers share: each raises :class:`GradeFailure` naming what differs."""
from __future__ import annotations

from minipar.grading.errors import GradeFailure


def close(actual, expected, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Raise :class:`GradeFailure` unless tensors/numbers ``actual`` match ``expected``; the
    reason names the first element that differs most and both values."""
    import torch

    if not isinstance(actual, torch.Tensor):
        try:
            actual = torch.as_tensor(actual, dtype=torch.float64)
        except Exception:  # noqa: BLE001
            raise GradeFailure(f"{what}: expected a tensor or number, got "
                               f"{type(actual).__name__}") from None
    expected = torch.as_tensor(expected)
    if tuple(actual.shape) != tuple(expected.shape):
        raise GradeFailure(f"{what}: shape {tuple(actual.shape)}, expected "
                           f"{tuple(expected.shape)}")
    a, e = actual.double(), expected.double()
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        diff = (a - e).abs().nan_to_num(nan=float("inf"))
        err = diff.max().item()
        if a.dim() == 0:
            raise GradeFailure(f"{what}: {a.item():.6g}, expected {e.item():.6g}")
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), a.shape))
        at = idx[0] if len(idx) == 1 else list(idx)
        raise GradeFailure(f"{what}: wrong values (max abs error {err:.3g}, at element {at}: "
                           f"{a[idx].item():.6g}, expected {e[idx].item():.6g})")


def as_number(value, complaint: str) -> float:
    """``float(value)``, or :class:`GradeFailure` "<complaint>, got <value>"."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise GradeFailure(f"{complaint}, got {value!r}") from None


def close_number(actual, expected: float, what: str, rel: float = 0.01) -> None:
    """Numeric answer within a relative tolerance, with the expected order of magnitude hinted."""
    x = as_number(actual, f"{what}: expected a number")
    if not abs(x - expected) <= rel * abs(expected):
        side = "too large" if x > expected else "too small"
        raise GradeFailure(f"{what}: {x:.4g} is {side} (tolerance {rel:.0%}); check units "
                           "(bytes vs elements, GB vs GiB) and which factors apply")
