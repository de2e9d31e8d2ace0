"""Type predicates for untrusted values (checkpoint metadata, annotation files, model arguments): one definition each.

Python's ``bool`` is an ``int``; a value read from JSON as ``true`` must not pass as a count, so both predicates refuse
it. They import nothing of the library (the lowest layer of the import contract)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_finite_number", "is_finite_scalar", "is_int", "is_integer_scalar"]


def is_int(value: Any) -> bool:
    """A Python ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite Python ``int`` or ``float`` that is not a ``bool`` (NaN and infinities are refused)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_integer_scalar(value: Any) -> bool:
    """An integer of Python, numpy or a 0-d tensor, not a ``bool``: what a shape or a generator's count may be
    (read from arrays). Not for values that go on to JSON metadata: :func:`is_int` is."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    dtype = getattr(value, "dtype", None)  # numpy integers and 0-d integer tensors
    return dtype is not None and getattr(value, "ndim", 0) == 0 and "int" in str(dtype) and "bool" not in str(dtype)


def is_finite_scalar(value: Any) -> bool:
    """A finite real number of Python, numpy or a 0-d tensor, not a ``bool`` (NaN and infinities refused)."""
    if is_integer_scalar(value):
        return True
    if isinstance(value, bool):
        return False
    dtype = getattr(value, "dtype", None)
    if not (
        isinstance(value, float) or (dtype is not None and getattr(value, "ndim", 0) == 0 and "float" in str(dtype))
    ):
        return False
    return math.isfinite(float(value))
