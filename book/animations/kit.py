"""The animation kit: registration and the shared player.

An animation function takes no argument and returns ``(data, frames)``::

    from animations.kit import animation

    @animation(draws=["minipar.collectives.ring.reduce_scatter_step"])
    def ring_all_reduce():
        data = {"kind": "ring", ...}      # JSON the page inlines; the player reads only this
        frames = [...]                    # what each step must show, computed in Python
        return data, frames

``draws`` lists the dotted names of the library functions the data is computed from (the test
checks each is called). ``data["kind"]`` selects the player's step logic (``player.js``:
``ring``, ``pipeline``, ``ring_attention``); the player's ``frames(data)`` must equal
``frames`` exactly (integers and labels) or to 1e-12 relative (the softmax statistics).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAYER = HERE / "player.js"

#: name (the module's name, ``book/animations/<name>.py``) -> registered animation
REGISTRY: dict[str, Animation] = {}


@dataclass(frozen=True)
class Animation:
    name: str
    build: Callable[[], tuple[dict, list]]
    draws: tuple[str, ...] = field(default_factory=tuple)


def animation(draws: list[str] | tuple[str, ...]):
    """Register the decorated function as animation ``<its module's last name>``."""

    def register(fn):
        name = fn.__module__.rsplit(".", 1)[-1]
        if name in REGISTRY and REGISTRY[name].build is not fn:
            raise ValueError(f"animation {name} is registered twice")
        REGISTRY[name] = Animation(name, fn, tuple(draws))
        return fn

    return register


def load(name: str) -> Animation:
    """The animation ``name``, importing ``animations.<name>`` on first use."""
    if name not in REGISTRY:
        importlib.import_module(f"animations.{name}")
    if name not in REGISTRY:
        raise KeyError(f"no animation {name!r} in book/animations/{name}.py")
    return REGISTRY[name]


def names() -> list[str]:
    """Every animation module in this folder."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("__init__", "kit"))


def player() -> str:
    """The shared player's JavaScript (one file for every animation)."""
    return PLAYER.read_text(encoding="utf-8")
