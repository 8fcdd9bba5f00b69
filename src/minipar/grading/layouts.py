"""Run a checker's case on every group layout of a launch (a chapter's ``LAYOUTS``: world size ->
[(label, groups or None)]): the whole world, groups of one rank, both groups of a 2x2 grid...

Runs on each rank. Every rank creates every group of a layout (``new_group`` is collective), runs
``case(group_rank, group_size, group)`` inside the chapter's course-code watch and gets back the
case's result dict with what every chapter's reasons need: ``label``, ``rank``, ``gr``,
``members``, ``world``, ``where``, ``whole`` (the default group) and ``used`` (course modules it
called). The case in progress is written to stderr, so a rank that dies mid-case names it.
"""

from __future__ import annotations

import os

from minipar.grading.imports import course_calls, forbidden_modules


def on_every_layout(rank, world, layouts, chapter, case, allow=(), note=None):
    """[(result, groups)] for each layout of ``layouts[world]``, in order."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = []
    for label, groups in layouts[world]:
        if groups is None:
            group, members = None, list(range(world))
        else:
            handles = [dist.new_group(g) for g in groups]  # every rank creates every group
            k = next(i for i, g in enumerate(groups) if rank in g)
            group, members = handles[k], groups[k]
        gr, size = members.index(rank), len(members)
        where = f"{label}, rank {rank}" + (
            "" if groups is None else f" (rank {gr} of group {members})"
        )
        os.write(2, f"minipar check: running case {where}\n".encode())
        if note is not None:
            note(where)
        with course_calls(forbidden_modules(chapter), allow) as used:
            res = case(gr, size, group)
        res.update(
            label=label,
            rank=rank,
            gr=gr,
            members=members,
            world=world,
            where=where,
            whole=groups is None,
            used=list(used),
        )  # in the order of first use
        out.append((res, groups))
    return out
