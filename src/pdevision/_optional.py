"""Optional dependencies: imported where a feature needs them, or one line naming the extra to install.

The core install (``pip install pdevision``) holds what building and running the models needs; each feature that
needs more imports its packages through :func:`require`, so a missing one reads, in Python and on the command line::

    segmentation-models-pytorch is not installed; run: pip install "pdevision[dense]"

This module imports nothing from pdevision (import-linter's contract in pyproject.toml), so any layer may use it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from types import ModuleType

# the top-level module each optional package installs -> its distribution (the name pip installs)
DISTRIBUTIONS: dict[str, str] = {
    "bm3d": "bm3d",
    "imagecorruptions": "imagecorruptions",
    "matplotlib": "matplotlib",
    "pycocotools": "pycocotools",
    "pytorch_grad_cam": "grad-cam",
    "segmentation_models_pytorch": "segmentation-models-pytorch",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "torchmetrics": "torchmetrics",
    "webdataset": "webdataset",
}

# the extras of pyproject.toml's [project.optional-dependencies] that a hint may name
EXTRAS = ("train", "data", "dense", "restore", "viz", "robustness", "all")


class MissingDependencyError(ImportError):
    """A feature's optional package is not installed; the message (one line) names the ``pip install`` to run."""


def install_hint(module: str, extra: str) -> str:
    """The one line for a missing ``module`` (a dotted import name) that ``pdevision[extra]`` installs."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r} (expected one of {', '.join(EXTRAS)})")
    top = module.partition(".")[0]
    if top not in DISTRIBUTIONS:
        raise ValueError(f"{top!r} is not an optional dependency (expected one of {', '.join(sorted(DISTRIBUTIONS))})")
    return f'{DISTRIBUTIONS[top]} is not installed; run: pip install "pdevision[{extra}]"'


def require(module: str, extra: str) -> ModuleType:
    """``import module`` (dotted names allowed), or :class:`MissingDependencyError` naming ``pdevision[extra]``.

    Only the package itself being absent is turned into the hint; an import error from inside an installed
    package (a broken install) is raised as it is."""
    message = install_hint(module, extra)  # checks the names before importing anything
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.partition(".")[0]
        if exc.name is None or (exc.name != top and not exc.name.startswith(top + ".")):
            raise
        raise MissingDependencyError(message, name=top) from None


def installed(module: str) -> bool:
    """Whether ``module``'s top-level package can be imported, found without importing it (a cheap check)."""
    top = module.partition(".")[0]
    if top in sys.modules:
        return sys.modules[top] is not None  # None: imports of it are blocked
    return importlib.util.find_spec(top) is not None


def require_all(needs: Iterable[tuple[str, str]]) -> None:
    """Check ``(module, extra)`` pairs before a long run starts, without importing them: the first missing one
    raises its hint."""
    for module, extra in needs:
        message = install_hint(module, extra)
        if not installed(module):
            raise MissingDependencyError(message, name=module.partition(".")[0])


__all__ = ["DISTRIBUTIONS", "EXTRAS", "MissingDependencyError", "install_hint", "installed", "require", "require_all"]
