"""Model families, registered in timm's registry on import; the restoration nets, in this library's own registry
(:func:`list_restoration_models`); and the self-supervised models QB-Heat and MAE. A new family's model class
subclasses :class:`StagedBackbone` and is built by ``models._staged.create_staged`` (timm's ``build_model_with_cfg``
with :func:`feature_cfg`; docs/adding-a-family.md)."""

from __future__ import annotations

import timm

from pdevision.models import (
    hcnet,  # noqa: F401  (registers hcnet_* in timm)
    pdeformer,  # noqa: F401  (registers pdeformer_* in timm)
    pderesnet,  # noqa: F401  (registers pderesnet* in timm)
    waveformer,  # noqa: F401  (registers waveformer_* in timm)
)
from pdevision.models._staged import StagedBackbone, feature_cfg
from pdevision.models.mae import MAE
from pdevision.models.qbheat import QBHeat
from pdevision.models.restoration import list_restoration_models  # vheatir_*, swinir_*, dncnn_*: not in timm
from pdevision.models.vheat import VHeat, checkpoint_filter_fn
from pdevision.models.waveformer import WaveFormer

FAMILIES: tuple[str, ...] = ("vheat", "waveformer", "hcnet", "pderesnet", "pdeformer")


def list_models(pattern: str = "") -> list[str]:
    """Names of the models this library registers in timm (optionally filtered by a wildcard)."""
    names: list[str] = []
    for family in FAMILIES:
        names += timm.list_models(pattern or "*", module=family)
    return names


__all__ = [
    "FAMILIES",
    "MAE",
    "QBHeat",
    "StagedBackbone",
    "VHeat",
    "WaveFormer",
    "checkpoint_filter_fn",
    "feature_cfg",
    "list_models",
    "list_restoration_models",
]
