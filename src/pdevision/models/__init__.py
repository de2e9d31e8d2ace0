"""Model families, registered in timm's registry on import, and the self-supervised models QB-Heat and MAE."""

from __future__ import annotations

import timm

from pdevision.models import (
    hcnet,  # noqa: F401  (registers hcnet_* in timm)
    pderesnet,  # noqa: F401  (registers pderesnet* in timm)
    restoration,  # noqa: F401  (registers vheatir_*, swinir_*, dncnn_* in timm; not backbones, not in FAMILIES)
)
from pdevision.models.mae import MAE
from pdevision.models.qbheat import QBHeat
from pdevision.models.vheat import VHeat, checkpoint_filter_fn

FAMILIES: tuple[str, ...] = ("vheat", "hcnet", "pderesnet")


def list_models(pattern: str = "") -> list[str]:
    """Names of the models this library registers in timm (optionally filtered by a wildcard)."""
    names: list[str] = []
    for family in FAMILIES:
        names += timm.list_models(pattern or "*", module=family)
    return names


__all__ = ["FAMILIES", "MAE", "QBHeat", "VHeat", "checkpoint_filter_fn", "list_models"]
