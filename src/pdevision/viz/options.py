"""The flags of ``pdevision viz <what>``: a dataclass of :func:`~pdevision.engine.config.setting` fields per figure
(the command line adds them: :mod:`pdevision.cli`); ``--checkpoint`` is the one declaration of
:class:`~pdevision.engine.config.CheckpointOptions`."""

from __future__ import annotations

from dataclasses import dataclass

from pdevision.engine import validators as V
from pdevision.engine.config import CheckpointOptions, Flag, setting

VIZ_CHECKPOINT = "run folder (uses best/, else last/) or checkpoint folder"


@dataclass
class VizOptions(CheckpointOptions):
    data: str | None = setting(
        None,
        None,
        Flag(help="ImageFolder root for the images (default: the run's data, else scikit-image photos / digits)"),
    )


@dataclass
class _RandomModels:  # before the checkpoint flags in --help (fields of the last base come first)
    models: list[str] | None = setting(  # noqa: RUF009
        None, None, Flag(nargs="+", help="model names, random weights (default: micro models and peers)")
    )


@dataclass
class ErfOptions(VizOptions, _RandomModels):
    img_size: int = setting(128, V.figure_side, Flag(help="input size for --models (default 128)"))
    images: int = setting(16, V.samples, Flag(help="images to average over (default 16)"))
    device: str = setting("cpu", V.device, Flag())
    output: str = setting("runs/viz/erf", V.output_folder, Flag(help="folder for erf.png and erf.json"))


@dataclass
class GradcamOptions(VizOptions):
    images: list[str] = setting(  # noqa: RUF009
        None,
        None,
        Flag(name="images", nargs="*", help="image files (default: validation images of the run's data)"),
        factory=list,
    )
    num_images: int = setting(4, V.samples, Flag(help="validation images without files (default 4)"))
    device: str = setting("cpu", V.device, Flag())
    output: str = setting("runs/viz/gradcam", V.output_folder, Flag(help="folder for gradcam.png and gradcam.json"))


@dataclass
class _RandomModel:
    model: str | None = setting(None, None, Flag(help="model name, random weights", one_of="--model, --checkpoint"))


@dataclass
class HeatOptions(VizOptions, _RandomModel):
    img_size: int = setting(64, V.figure_side, Flag(help="input size for --model (default 64)"))
    images: int = setting(32, V.samples, Flag(help="images for HcNet / PDE-ResNet (default 32)"))
    times: list[float] = setting(  # noqa: RUF009
        None,
        V.bounded(float, 0, None, low_open=True),
        Flag(nargs="+", help="point-source times"),
        factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0],
    )
    gif: bool = setting(False, None, Flag(help="also vheat_point_source.gif"))
    output: str = setting("runs/viz/heat", V.output_folder, Flag())


@dataclass
class SymmetryOptions(VizOptions):
    images: int = setting(32, V.samples, Flag(help="images for the logits difference (default 32)"))
    steps: int = setting(100, V.repeats, Flag(help="sparsify steps (default 100)"))
    seed: int = setting(0, V.seed, Flag(help="seed of the random group element"))
    output: str = setting("runs/viz/symmetry", V.output_folder, Flag())


@dataclass
class ReportOptions(VizOptions):
    images: int = setting(8, V.samples, Flag(help="images for the figures (default 8)"))
    steps: int = setting(50, V.repeats, Flag(help="sparsify steps for PDE-ResNet (default 50)"))
    output: str = setting("runs/viz/report", V.output_folder, Flag(help="folder for index.html and its files"))


__all__ = [
    "VIZ_CHECKPOINT",
    "ErfOptions",
    "GradcamOptions",
    "HeatOptions",
    "ReportOptions",
    "SymmetryOptions",
    "VizOptions",
]
