"""The data layer's error: a data set, annotation file or image that cannot be used as given."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """A data set that cannot be used as given (missing, empty, inconsistent)."""
