"""Time limits for graded code: one mechanism shared by every checker.

``run_ranks(fn, world_size, *args)`` runs ``fn(rank, world_size, *args)`` on fresh gloo ranks
(:func:`minipar.launch.run`) and turns every way the learner's ranks can fail into a
:class:`~minipar.grading.GradeFailure` whose message is the learner's one-line reason:

* a rank raised or died: :class:`RankFailure` (a ``GradeFailure``) carrying the launcher's
  ``RankError`` as ``.error`` (``rank``, ``summary``, ``remote_traceback``, ``stderr_tail``),
  so a checker can still look at what the rank said;
* ranks that never finish (a deadlock, an endless loop): a ``GradeFailure`` saying so.

Checkers never pass their own ``timeout``: the limit is the grader's business, not the chapter's.
"""
from __future__ import annotations

from minipar.grading import GradeFailure, reason_for

# A generous wall-clock budget per call (a placeholder while the progress-based limit lands).
RUN_TIMEOUT = 300.0


class RankFailure(GradeFailure):
    """A rank raised or died; ``error`` is the launcher's :class:`minipar.launch.RankError`."""

    def __init__(self, reason: str, error):
        super().__init__(reason)
        self.error = error
        self.rank = getattr(error, "rank", None)
        self.summary = getattr(error, "summary", "")
        self.remote_traceback = getattr(error, "remote_traceback", "")
        self.stderr_tail = getattr(error, "stderr_tail", "")


def run_ranks(fn, world_size: int, *args, **kwargs) -> list:
    """``minipar.launch.run(fn, world_size, *args, backend="gloo")`` with the grader's limits;
    per-rank results in rank order, or a :class:`GradeFailure` with the learner's reason."""
    from minipar.launch import RankError, run

    kwargs.pop("timeout", None)          # the grader decides, not the checker
    kwargs.setdefault("backend", "gloo")
    try:
        return run(fn, world_size, *args, timeout=RUN_TIMEOUT, **kwargs)
    except RankError as e:
        if "timed out" in (e.summary or "").lower():
            raise GradeFailure(f"deadlock on {world_size} ranks: rank {e.rank} waited in a "
                               "collective or recv that its peers never matched -- does every "
                               "rank make the same collective calls, in the same order, and "
                               "does every send have a matching recv?") from None
        raise RankFailure(reason_for(e), e) from None
    except TimeoutError as e:
        raise GradeFailure(f"{world_size} ranks never finished ({e}): an endless loop, or a "
                           "wait that never ends?") from None


__all__ = ["run_ranks", "RankFailure", "RUN_TIMEOUT"]
