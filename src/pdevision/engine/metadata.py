"""The one reader of untrusted JSON metadata (a checkpoint's safetensors header values, a run's ``config.json``,
``--model-args``): bounded in size and in nesting depth before the parser sees it.

Python's ``json`` parser recurses once per level of nesting: a value nested deeper than the interpreter's recursion
limit raises ``RecursionError`` (not ``json.JSONDecodeError``), and an integer of more than 4300 digits raises a
``ValueError`` of its own. :func:`parse_json` turns each of these into one :class:`MetadataError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_METADATA_BYTES = 16 * 1024 * 1024  # a checkpoint's whole metadata: ImageNet-21k's class names are 0.3 MB
MAX_JSON_DEPTH = 32  # nesting levels of one value: the library writes at most 3

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class MetadataError(ValueError):
    """JSON metadata that is not JSON, is too large, or is nested too deeply (the message says which)."""


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in the JSON ``text`` (brackets inside strings not counted);
    computed without recursion."""
    if text.count("[") + text.count("{") <= 1:
        return int("[" in text or "{" in text)
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        depth += 1 if char in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text: str, max_bytes: int = MAX_METADATA_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` when ``text`` is at most ``max_bytes`` long and nested at most ``max_depth`` deep; else,
    and for text that is not JSON, a :class:`MetadataError` saying why (the caller names the file)."""
    if not isinstance(text, str):
        raise MetadataError(f"metadata must be text, not {type(text).__name__}")
    if len(text) > max_bytes:
        raise MetadataError(f"metadata of {len(text):,} characters (the limit is {max_bytes:,})")
    depth = json_depth(text)
    if depth > max_depth:
        raise MetadataError(f"metadata nested {depth} levels deep (the limit is {max_depth})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"metadata that is not JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:  # an integer beyond Python's digit limit; unbalanced brackets
        raise MetadataError(f"metadata that cannot be read as JSON ({' '.join(str(exc).split())[:120]})") from None


class RepeatedKeyError(ValueError):
    """A mapping names a key twice (the second value would silently win)."""

    def __init__(self, key: Any) -> None:
        super().__init__(f"key {key!r} is set twice")
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the mapping, a :class:`RepeatedKeyError` where a key repeats."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKeyError(key)
        out[key] = value
    return out


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_METADATA_BYTES",
    "MetadataError",
    "RepeatedKeyError",
    "json_depth",
    "parse_json",
    "unique_pairs",
]
