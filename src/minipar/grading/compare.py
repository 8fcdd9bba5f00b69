"""Comparisons checkers share: each raises :class:`GradeFailure` naming what differs."""

from __future__ import annotations

from minipar.grading.errors import GradeFailure


def close(actual, expected, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Raise :class:`GradeFailure` unless tensors/numbers ``actual`` match ``expected``; the
    reason names the first element that differs most and both values."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if not isinstance(actual, torch.Tensor):
        try:
            actual = torch.as_tensor(actual, dtype=torch.float64)
        except Exception:
            raise GradeFailure(
                f"{what}: expected a tensor or number, got {type(actual).__name__}"
            ) from None
    expected = torch.as_tensor(expected)
    if tuple(actual.shape) != tuple(expected.shape):
        raise GradeFailure(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    a, e = actual.double(), expected.double()
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        if a.dim() == 0:
            raise GradeFailure(f"{what}: {a.item():.6g}, expected {e.item():.6g}")
        err, idx = _worst(a, e)
        at = idx[0] if len(idx) == 1 else idx
        raise GradeFailure(
            f"{what}: wrong values (max abs error {err:.3g}, at element {at}: "
            f"{a[tuple(idx)].item():.6g}, expected {e[tuple(idx)].item():.6g})"
        )


def _worst(actual, expected) -> tuple[float, list[int]]:
    """The largest difference of two tensors of one shape (NaN counts as infinitely far) and
    the index of the first element where it is ([] for a 0-d tensor)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    d = (actual.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    idx = [int(i) for i in torch.unravel_index(d.argmax(), d.shape)] if d.dim() else []
    return d.max().item(), idx


def as_number(value, complaint: str) -> float:
    """``float(value)`` for a number (int, float, or a one-element tensor or array), or
    :class:`GradeFailure` "<complaint>, got <value>": a string, a bool or a list is not the
    number the exercise asks for, even when float() would take it."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        raise GradeFailure(f"{complaint}, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise GradeFailure(f"{complaint}, got {type(value).__name__} {value!r}") from None


def close_number(actual, expected: float, what: str, rel: float = 0.01) -> None:
    """Numeric answer within a relative tolerance, with the expected order of magnitude hinted."""
    x = as_number(actual, f"{what}: expected a number")
    if not abs(x - expected) <= rel * abs(expected):
        side = "too large" if x > expected else "too small"
        raise GradeFailure(
            f"{what}: {x:.4g} is {side} (tolerance {rel:.0%}); check units "
            "(bytes vs elements, GB vs GiB) and which factors apply"
        )


# ---- helpers the chapter graders share (one definition, so they cannot drift apart) --------
def randn(*shape, seed: int, dtype=None):
    """A float64 (or ``dtype``) normal tensor from its own generator: the same on every rank
    and every run for one seed."""
    import torch  # noqa: PLC0415 (lazy: torch)

    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(seed), dtype=dtype or torch.float64
    )


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def type_error(actual, expected) -> str | None:
    """What is wrong with the *type* of ``actual`` against the tensor ``expected`` (not a
    tensor, another dtype, another shape), or None: the exercise states all three."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if not isinstance(actual, torch.Tensor):
        return (
            f"got {type(actual).__name__}, expected a tensor of shape "
            f"{tuple(expected.shape)} and dtype {_dtype_name(expected.dtype)}"
        )
    if actual.dtype != expected.dtype:
        return (
            f"dtype {_dtype_name(actual.dtype)}, expected {_dtype_name(expected.dtype)} "
            "(keep the input's dtype: no .float(), no torch.tensor(...) without dtype=)"
        )
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    return None


def same(actual, expected, atol: float = 1e-9, rtol: float = 1e-7) -> bool:
    """Same type (a tensor of ``expected``'s dtype and shape) and values within tolerance; NaN
    never matches."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if expected is None or type_error(actual, expected):
        return False
    return bool(torch.allclose(actual.double(), expected.double(), atol=atol, rtol=rtol))


def named_mistake(got, mistakes) -> str | None:
    """The reason of the first classic mistake ``(value, reason)`` that ``got`` matches:
    ``value`` is what that mistake gives, a function computing it only when needed (it can cost
    a backward pass), or None where it does not apply. A mistake that gives the right answer
    in a case (most do with a group of one rank) needs no condition: it never matches there,
    since it is only tried on an answer that is not the right one."""
    for value, reason in mistakes:
        value = value() if callable(value) else value
        if value is not None and same(got, value):
            return reason
    return None


def expect(where: str, got, want, mistakes=(), otherwise: str = "differs") -> None:
    """Nothing if ``got`` is ``want``; else :class:`GradeFailure` "<where>: <reason>", the
    reason of the first of ``mistakes`` it matches (:func:`named_mistake`), else ``otherwise``."""
    if not same(got, want):
        raise GradeFailure(f"{where}: {named_mistake(got, mistakes) or otherwise}")


def err(actual, expected) -> str:
    """Why ``actual`` is not ``expected``: its type (tensor, dtype, shape), else the largest
    difference and where it is (NaN counts as infinitely far)."""
    if expected is None:
        return "expected nothing here"
    wrong_type = type_error(actual, expected)
    if wrong_type:
        return wrong_type
    worst, idx = _worst(actual, expected)
    return f"max error {worst:.3g} at element {idx}"


def expect_tensor(actual, expected, what: str) -> None:
    """Raise :class:`GradeFailure` "<what>: <type_error>" unless ``actual`` has the type the
    exercise states (a tensor of ``expected``'s dtype and shape)."""
    wrong_type = type_error(actual, expected)
    if wrong_type:
        raise GradeFailure(f"{what}: {wrong_type}")
