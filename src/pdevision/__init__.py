"""pdevision: vision backbones built from partial differential equations.

Importing the package registers its models in timm's registry::

    import timm, pdevision
    model = timm.create_model("vheat_tiny", num_classes=10)
"""

from pdevision import models  # noqa: F401  (registers the models with timm)

__version__ = "0.1.0"
