"""Released weights by name (``train --pretrained``): the one download a command makes, with its failures in one line.

The file of a registered tag's URL is read from timm's cache (``$TORCH_HOME/hub/checkpoints/<file name>``, where
``timm.create_model(..., pretrained=True)`` keeps it) and downloaded there when it is missing, unless
``HF_HUB_OFFLINE`` is set. A network that cannot be reached, an offline setting with an empty cache, and a cached file
that is not weights (a partial copy placed by hand) are each a :class:`~pdevision.engine.checkpoint.CheckpointError`
naming the tag, the URL and the cache path. The file is read with ``weights_only=True``.
"""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Any

import torch
from timm.models._hub import download_cached_file

from pdevision._files import not_a_regular_file
from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.runtime import one_line
from pdevision.models._weights import cached_release, offline, release_advice

__all__ = ["cached_release", "offline", "released_state"]


def _download(tag: str, url: str, file: Path, advice: str) -> None:
    if offline():
        raise CheckpointError(f"--pretrained {tag}: HF_HUB_OFFLINE is set and {file} is not in timm's cache; {advice}")
    try:
        download_cached_file(url, check_hash=False, progress=False)
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError, a timeout, a refused connection
        raise CheckpointError(
            f"--pretrained {tag}: the released weights could not be downloaded from {url} ({one_line(exc)}); {advice}"
        ) from None


def released_state(tag: str, url: str) -> dict[str, Any]:
    """The state dict of the released weights at ``url`` (tag ``tag``), from timm's cache, downloaded once."""
    file = cached_release(url)
    advice = release_advice(url, file) + " with --init-from FILE"
    what = not_a_regular_file(file)
    if what is not None:
        raise CheckpointError(f"--pretrained {tag}: {file} in timm's cache is {what}, not a weights file")
    if not file.is_file():
        _download(tag, url, file, advice)
    try:
        state = torch.load(str(file), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's own message would suggest weights_only=False
        raise CheckpointError(
            f"--pretrained {tag}: the cached file {file} cannot be read as a weights-only PyTorch file "
            f"({type(exc).__name__}); delete it to download it again"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"--pretrained {tag}: the cached file {file} holds a {type(state).__name__}, not weights")
    return state
