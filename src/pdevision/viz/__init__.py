"""Seeing what the heat does: effective receptive fields, class activation maps, heat flow, PDE-ResNet's weight
symmetry, and an HTML report of a run. Every figure is a PNG (matplotlib, Agg backend) with a JSON of the
numbers behind it; no display and no network needed.

The functions behind ``pdevision viz <what>``: :func:`erf`, :func:`gradcam`, :func:`heat`, :func:`symmetry`,
:func:`report` (in :mod:`pdevision.viz.commands`); the pieces: :func:`erf_maps`, :func:`area_share`,
:func:`second_moments` (:mod:`pdevision.viz.erf`), :func:`gradcam_maps` and :func:`reshape_transform`
(:mod:`pdevision.viz.gradcam`), :func:`heat_figures` (:mod:`pdevision.viz.heat`), :func:`symmetry_figures`
(:mod:`pdevision.viz.symmetry`).
"""

from pdevision.viz.commands import DEFAULT_ERF_MODELS, erf, gradcam, heat, report, symmetry
from pdevision.viz.common import VizError, stage_layers
from pdevision.viz.erf import area_share, compute_erf, erf_maps, second_moments
from pdevision.viz.gradcam import gradcam as gradcam_maps
from pdevision.viz.gradcam import reshape_transform, reshape_transform_for, stage_cams
from pdevision.viz.heat import heat_figures
from pdevision.viz.symmetry import symmetry_figures

__all__ = [
    "DEFAULT_ERF_MODELS",
    "VizError",
    "area_share",
    "compute_erf",
    "erf",
    "erf_maps",
    "gradcam",
    "gradcam_maps",
    "heat",
    "heat_figures",
    "report",
    "reshape_transform",
    "reshape_transform_for",
    "second_moments",
    "stage_cams",
    "stage_layers",
    "symmetry",
    "symmetry_figures",
]
