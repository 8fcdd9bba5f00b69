"""The one error type for bad input, in a leaf module (imports nothing from minipar).

Library code and every command-line layer raise :class:`InputError` when an argument breaks a
rule; ``minipar`` (:mod:`minipar.cli`) prints it as one line and exits with status 2. Its
message names the rule and the value that broke it: ``"heads (12) must be divisible by t (5)"``.
It is a ``ValueError``, so code that already catches ``ValueError`` keeps working.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: one line naming the rule and the value; exit status 2 on the command line."""


__all__ = ["InputError"]
