"""The one error type for bad input, in a leaf module (imports nothing from minipar): library
code and every command-line layer raise :class:`InputError` when an argument breaks a rule, its
message naming the rule and the value (``"heads (12) must be divisible by t (5)"``); ``minipar``
prints it as one line and exits with status 2. A ``ValueError``, so code that catches
``ValueError`` keeps working.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: one line naming the rule and the value; exit status 2 on the command line."""


__all__ = ["InputError"]
