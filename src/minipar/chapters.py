"""The course's chapters, in reading order: the one list every other list is derived from.

A chapter ``<slug>`` has the same name everywhere (CONTRIBUTING.md, "One chapter slug
everywhere"). :func:`parts` gives the files a chapter must have (``tests/test_chapters.py``
checks them, and that no package holds a chapter the registry does not list); tests, the book's
figure checks and the explorer input checks read :data:`SLUGS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chapter:
    """One chapter: its slug and whether it has a ``minipar bench <slug>`` (memory_time measures
    in its notebook; the others time their implementations on ranks), where its cost model
    lives in ``minipar.cost`` (the collectives' is the network's, three_d's the planner's) and
    what its notebook needs on a GPU node (``scripts/gpu_check.py``): ``gpu`` is (the GPUs its
    NCCL or GPU part needs, or None where the chapter stays on gloo; why), None where that is
    not classified yet (the check then runs it on 2 GPUs and reports the backends it chose)."""

    slug: str
    bench: bool = True
    cost: str = "chapters"
    gpu: tuple[int | None, str] | None = None

    @property
    def cost_module(self) -> str:
        """The chapter's cost model, e.g. ``minipar.cost.chapters.data_parallel``."""
        return f"minipar.cost.{self.cost}.{self.slug}"


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(
        "collectives",
        cost="network",
        gpu=(
            2,
            "its sweep (minipar.bench.collectives.run_benchmark) picks NCCL with one GPU per rank",
        ),
    ),
    Chapter(
        "memory_time",
        bench=False,
        gpu=(1, "its memory measurements run on the first GPU (device.default_device)"),
    ),
    Chapter(
        "data_parallel",
        gpu=(2, "its step timings and bucket sweep launch with backend='auto' (NCCL)"),
    ),
    Chapter(
        "tensor_parallel",
        gpu=(
            None,
            "stays on gloo: float64 parity against a CPU reference on a CPU device mesh, and a "
            "host-clock timeline",
        ),
    ),
    Chapter(
        "pipeline_parallel",
        gpu=(
            None,
            "stays on gloo: float64 parity against a CPU reference, and stages that sleep a "
            "fixed time",
        ),
    ),
    Chapter("context_parallel"),
    Chapter("expert_parallel"),
    Chapter(
        "three_d",
        cost="planner",
        gpu=(
            8,
            "its group check launches 8 ranks with backend='auto' (NCCL with 8 GPUs); training "
            "stays on gloo",
        ),
    ),
)

#: the slugs, in reading order
SLUGS: tuple[str, ...] = tuple(c.slug for c in CHAPTERS)


def parts(chapter: Chapter) -> list[str]:
    """Paths (relative to the repository root) a chapter must have."""
    s = chapter.slug
    out = [
        f"book/{s}.md",
        f"book/{s}_exercises.md",
        f"book/{s}_appendix.md",
        f"book/figures/{s}.py",
        f"notebooks/{s}.ipynb",
        f"exercises/{s}/solutions",
        f"src/minipar/{s}/__init__.py",
        f"src/{chapter.cost_module.replace('.', '/')}.py",
        f"src/minipar/widgets/{s}.js",
        f"src/minipar/widgets/{s}.py",
        f"src/minipar/grading/{s}.py",
    ]
    if chapter.bench:
        out.append(f"src/minipar/bench/{s}.py")
    return out
