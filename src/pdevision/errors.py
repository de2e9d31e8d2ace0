"""The error a user's input causes: :class:`UsageError`, printed by the ``pdevision`` command as one line with exit
code 2. Any other exception is a fault of the library (exit 1, its traceback on request). It imports nothing of the
library (the lowest layer of the import contract), so every layer can raise it."""

from __future__ import annotations

__all__ = ["PartialFailure", "UsageError"]


class UsageError(ValueError):
    """A user error (a flag, a file, a value given): one line naming what was wrong and what was expected; exit
    code 2. A ``ValueError``, so code that calls the library and catches ``ValueError`` still catches it."""


class PartialFailure(Exception):
    """Some inputs could not be read (each named already, on stderr), the others were done and their results
    written: the command prints this one line and exits with 3 (a usage error is 2). ``predict`` of every task."""
