"""Type predicates for untrusted values (checkpoint metadata, annotation files, model arguments): one definition each.

Python's ``bool`` is an ``int``; a value read from JSON as ``true`` must not pass as a count, so both predicates refuse
it. They import nothing of the library (the lowest layer of the import contract)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_finite_number", "is_int"]


def is_int(value: Any) -> bool:
    """A Python ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite Python ``int`` or ``float`` that is not a ``bool`` (NaN and infinities are refused)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
