"""Model families, registered in timm's registry on import."""

from pdevision.models.vheat import VHeat, checkpoint_filter_fn

__all__ = ["VHeat", "checkpoint_filter_fn"]
