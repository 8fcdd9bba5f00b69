"""The two exceptions a check turns into a FAIL line (a leaf module: imports nothing)."""

from __future__ import annotations


class GradeFailure(Exception):
    """Raised by a checker: the message is the one-line reason shown to the learner."""


class CheckTimeLimit(BaseException):
    """Raised inside a check that ran past its limit in this process (not on ranks). A
    ``BaseException``, so that a learner's ``except Exception`` cannot swallow it."""
