"""Any registered backbone (this library's or timm's) under dense-prediction heads, by name.

* Semantic segmentation: segmentation_models_pytorch's UPerNet, FPN and Unet decoders on the backbone
  through smp's timm-universal encoder (``tu-<name>``), wrapped so that any input size runs: the batch is
  zero-padded at the bottom and right to a multiple of ``size_divisor`` (32, mmseg's ``size_divisor``) and
  the logits are cropped back to the input size. NHWC backbones (Swin) are permuted by smp.
* Detection and instance segmentation: torchvision's Faster R-CNN and Mask R-CNN on a
  :class:`BackboneWithFPN` (timm ``features_only`` maps at strides 4-32, NCHW, a torchvision
  ``FeaturePyramidNetwork`` with ``LastLevelMaxPool``). torchvision's detector transform resizes the
  images (``min_size``/``max_size``) and pads them to a multiple of 32 itself.

Layout: images are NCHW float in ``[0, 1]``; segmentation logits are NCHW ``(B, num_classes, H, W)``.

The vHeat and HcNet papers (and the vHeat authors' ``detection/`` and ``segmentation/`` code) put a
LayerNorm on every output map of the backbone before the neck; :class:`BackboneWithFPN` does the same for
backbones without BatchNorm (``out_norm=None`` picks it; ResNet-style networks keep their maps as they
are). The smp decoders normalise with BatchNorm after their first convolution and get the maps as smp's
encoder returns them.
"""

from __future__ import annotations

import difflib
import logging
import types
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import LayerNorm2d
from torch import nn
from torchvision.models.detection import FasterRCNN, MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.ops.feature_pyramid_network import FeaturePyramidNetwork, LastLevelMaxPool

from pdevision._files import not_a_regular_file
from pdevision._optional import require
from pdevision.models._arguments import ModelNameError, check_model_size

__all__ = [
    "DETECTION_HEADS",
    "SEGMENTATION_HEADS",
    "BackboneWithFPN",
    "SegmentationModel",
    "create_detection_model",
    "create_segmentation_model",
    "pretrained_overlay",
]

_logger = logging.getLogger(__name__)

SEGMENTATION_HEADS = ("upernet", "fpn", "unet")
DETECTION_HEADS = ("mask_rcnn", "faster_rcnn")


def _check_name(name: str) -> None:
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (see `pdevision models` or timm.list_models())"
        raise ModelNameError(f"unknown model {name!r}{hint}")


def _probe(name: str, kwargs: dict[str, Any]) -> nn.Module:
    """A ``features_only`` instance to read feature strides and channels from (on the meta device when
    the model builds there: no memory, no initialisation)."""
    try:
        with torch.device("meta"):
            return timm.create_model(name, features_only=True, **kwargs)
    except (NotImplementedError, RuntimeError):
        return timm.create_model(name, features_only=True, **kwargs)


def backbone_kwargs_for(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without ``img_size`` for models that do not take it (ResNets, PDE-ResNet): the dense
    builders pass the training crop to every backbone and the ones with a size-dependent part (vHeat's
    FVEs, Swin's attention masks) use it. The model the arguments ask for is bounded in parameters
    (:func:`~pdevision.models.factory.check_model_size`) before anything is allocated."""
    if kwargs:  # the crop's size too: vHeat's FVEs grow with it
        check_model_size(lambda: timm.create_model(name, features_only=True, **kwargs), name, kwargs)
    if "img_size" not in kwargs:
        return dict(kwargs)
    try:
        _probe(name, kwargs)
    except TypeError as exc:
        if "img_size" not in str(exc):
            raise
        return {k: v for k, v in kwargs.items() if k != "img_size"}
    return dict(kwargs)


# Backbone weights for the dense builders: a local weights file (``.safetensors`` or ``.pth``) or a state dict.
# Turning a checkpoint folder into its weights file is the caller's job (pdevision.engine.checkpoint).
Weights = str | Path | Mapping[str, torch.Tensor]


def pretrained_overlay(checkpoint: Weights | None) -> dict[str, Any]:
    """timm arguments that load local classification or pretraining weights (a weights file, e.g. a checkpoint
    folder's ``model.safetensors``, or a state dict) into a ``features_only`` backbone: timm loads the weights into
    the whole network first (through the family's checkpoint filter, which for vHeat resizes the FVEs by
    ``fve_resize``), drops the classifier, and then cuts the feature extractor. A folder is refused: resolve it to
    its weights file first."""
    if checkpoint is None:
        return {}
    if isinstance(checkpoint, Mapping):
        # a copy: timm drops the classifier entries from the dict it is given
        return dict(pretrained=True, pretrained_cfg_overlay=dict(state_dict=dict(checkpoint), hf_hub_id=None, url=None))
    path = Path(checkpoint)
    if path.is_dir():
        raise IsADirectoryError(f"{checkpoint} is a folder; pass its weights file (e.g. model.safetensors)")
    what = not_a_regular_file(path)
    if what is not None:
        raise ValueError(f"{checkpoint} is {what}, not a regular file; a weights file is expected")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {checkpoint}")
    return dict(pretrained=True, pretrained_cfg_overlay=dict(file=str(path), hf_hub_id=None, url=None))


def no_weight_decay_names(root: nn.Module) -> set[str]:
    """Full names (in ``root``) of the parameters a backbone inside ``root`` lists in its
    ``no_weight_decay()`` (vHeat's FVEs), for timm's optimizer factory."""
    names: set[str] = set()
    for prefix, module in root.named_modules():
        if module is root or not hasattr(module, "no_weight_decay"):
            continue
        for key in module.no_weight_decay():
            names.add(f"{prefix}.{key}" if prefix else key)
    own = {n for n, _ in root.named_parameters()}
    return names & own


# -- segmentation ---------------------------------------------------------------------------------


class SegmentationModel(nn.Module):
    """An smp segmentation model that takes any input size: pads to ``size_divisor``, crops back.

    ``forward(x)``: ``(B, C, H, W)`` images to ``(B, num_classes, H, W)`` logits.
    ``backbone`` is the timm feature extractor inside smp's encoder (for parameter groups).
    """

    def __init__(self, smp_model: nn.Module, num_classes: int, size_divisor: int = 32) -> None:
        super().__init__()
        self.net = smp_model
        self.num_classes = num_classes
        self.size_divisor = size_divisor

    @property
    def backbone(self) -> nn.Module:
        return self.net.encoder.model

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return no_weight_decay_names(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        d = self.size_divisor
        ph, pw = (-h) % d, (-w) % d
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph))
        out = self.net(x)
        return out[..., :h, :w]


def create_segmentation_model(
    backbone: str,
    num_classes: int,
    head: str = "upernet",
    size_divisor: int = 32,
    checkpoint: Weights | None = None,
    decoder_channels: int | None = None,
    **backbone_kwargs: Any,
) -> SegmentationModel:
    """Semantic segmentation model: ``backbone`` (any timm-registered name) under an smp decoder.

    Args:
        backbone: model name (``vheat_tiny``, ``hcnet_micro``, ``convnext_tiny``, ``resnet50``, ...).
        num_classes: output classes (background included when it is a class).
        head: ``"upernet"`` (the papers' ADE20K head), ``"fpn"`` or ``"unet"``.
        size_divisor: inputs are padded to a multiple of this (the backbone's total stride, 32).
        checkpoint: local classification or pretraining weights for the backbone, a weights file or a state dict
            (its head is dropped); see :func:`pretrained_overlay`.
        decoder_channels: UPerNet/FPN width (smp's defaults: 256 / 256); Unet keeps smp's widths.
        **backbone_kwargs: passed to ``timm.create_model`` (``img_size``, ``fve_resize``, ``drop_path_rate``).
    """
    # smp is imported on use only (it pulls in huggingface_hub and every smp encoder); not to dodge a cycle
    smp = require("segmentation_models_pytorch", "dense")

    _check_name(backbone)
    if head not in SEGMENTATION_HEADS:
        raise ValueError(f"unknown segmentation head {head!r}; choose from {', '.join(SEGMENTATION_HEADS)}")
    kwargs = dict(backbone_kwargs_for(backbone, backbone_kwargs), **pretrained_overlay(checkpoint))
    weights = kwargs.pop("pretrained", None)  # smp: True loads the (overlaid) pretrained file, None does not
    common = dict(encoder_name=f"tu-{backbone}", encoder_weights=weights, classes=num_classes, **kwargs)
    if head == "upernet":
        net = smp.UPerNet(decoder_channels=decoder_channels or 256, **common)
    elif head == "fpn":
        ch = decoder_channels or 256
        seg = max(32, ch // 64 * 32)  # smp's FPN GroupNorm has 32 groups
        net = smp.FPN(decoder_pyramid_channels=ch, decoder_segmentation_channels=seg, **common)
    else:
        net = smp.Unet(**common)
    return SegmentationModel(net, num_classes, size_divisor)


# -- detection ------------------------------------------------------------------------------------


class BackboneWithFPN(nn.Module):
    """A timm ``features_only`` backbone (strides 4, 8, 16, 32; NCHW, NHWC permuted) with a torchvision
    ``FeaturePyramidNetwork`` and ``LastLevelMaxPool``: what torchvision's R-CNNs take as ``backbone``.

    ``forward(x)`` returns an ``OrderedDict`` ``{"0": P2, "1": P3, "2": P4, "3": P5, "pool": P6}`` of
    ``(B, out_channels, H/s, W/s)`` maps. ``out_norm``: a LayerNorm over channels on each backbone map
    before the FPN (Swin, vHeat and HcNet detectors do so); ``None`` adds it when the backbone has no
    BatchNorm.
    """

    def __init__(
        self,
        name: str,
        out_channels: int = 256,
        out_norm: bool | None = None,
        checkpoint: Weights | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _check_name(name)
        kwargs = backbone_kwargs_for(name, kwargs)
        reductions = list(_probe(name, kwargs).feature_info.reduction())
        wanted = [r for r in (4, 8, 16, 32) if r in reductions]
        if wanted != [4, 8, 16, 32]:
            raise ValueError(f"{name} has feature strides {reductions}; an FPN needs 4, 8, 16 and 32")
        indices = tuple(reductions.index(r) for r in wanted)
        self.body = timm.create_model(
            name, features_only=True, out_indices=indices, **kwargs, **pretrained_overlay(checkpoint)
        )
        self.channels_last = str(getattr(self.body, "output_fmt", "NCHW")) in ("NHWC", "Format.NHWC")
        in_channels = list(self.body.feature_info.channels())
        if out_norm is None:
            out_norm = not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.body.modules())
        self.out_norms = nn.ModuleList(LayerNorm2d(c) if out_norm else nn.Identity() for c in in_channels)
        self.fpn = FeaturePyramidNetwork(in_channels, out_channels, extra_blocks=LastLevelMaxPool())
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        feats = self.body(x)
        if self.channels_last:
            feats = [f.permute(0, 3, 1, 2) for f in feats]
        pairs = zip(feats, self.out_norms, strict=True)
        maps = OrderedDict((str(i), norm(f.contiguous())) for i, (f, norm) in enumerate(pairs))
        return self.fpn(maps)


def create_detection_model(
    backbone: str,
    num_classes: int,
    head: str = "mask_rcnn",
    min_size: int | tuple[int, ...] = 800,
    max_size: int = 1333,
    fpn_channels: int = 256,
    representation_size: int = 1024,
    mask_channels: int = 256,
    anchor_sizes: tuple[int, ...] = (32, 64, 128, 256, 512),
    out_norm: bool | None = None,
    checkpoint: Weights | None = None,
    detector_kwargs: dict[str, Any] | None = None,
    **backbone_kwargs: Any,
) -> nn.Module:
    """torchvision Mask R-CNN (default) or Faster R-CNN with FPN on ``backbone``.

    Args:
        backbone: any timm-registered model name.
        num_classes: foreground classes; the detector gets ``num_classes + 1`` (class 0 is background,
            so dataset class ``c`` is label ``c + 1``).
        head: ``"mask_rcnn"`` or ``"faster_rcnn"``.
        min_size: torchvision's resize of the shorter side (COCO: 800); a tuple picks one at random per
            training batch (multi-scale training).
        max_size: torchvision's cap on the longer side (COCO: 1333).
        fpn_channels: FPN width (256 in the papers).
        representation_size: width of the box head's two fully connected layers (torchvision: 1024).
        mask_channels: width of the mask head's four 3x3 convolutions (torchvision: 256).
        anchor_sizes: one anchor size per pyramid level P2-P6 (aspect ratios 0.5, 1, 2), torchvision's
            default for COCO-sized images; smaller for small images.
        out_norm: see :class:`BackboneWithFPN`.
        checkpoint: local classification or pretraining weights for the backbone, a weights file or a state dict.
        detector_kwargs: further arguments of torchvision's ``MaskRCNN``/``FasterRCNN``.
        **backbone_kwargs: passed to ``timm.create_model``.

    Images go in as a list of ``(3, H, W)`` tensors in ``[0, 1]`` (any size); ImageNet mean and std
    are applied by the detector's transform.
    """
    if head not in DETECTION_HEADS:
        raise ValueError(f"unknown detection head {head!r}; choose from {', '.join(DETECTION_HEADS)}")
    body = BackboneWithFPN(backbone, fpn_channels, out_norm=out_norm, checkpoint=checkpoint, **backbone_kwargs)
    cls = MaskRCNN if head == "mask_rcnn" else FasterRCNN
    det_args = dict(
        min_size=min_size,
        max_size=max_size,
        image_mean=list(IMAGENET_DEFAULT_MEAN),
        image_std=list(IMAGENET_DEFAULT_STD),
    )
    if len(anchor_sizes) != 5:
        raise ValueError(f"anchor_sizes needs one size per level P2-P6 (5), got {anchor_sizes}")
    det_args["rpn_anchor_generator"] = AnchorGenerator(tuple((a,) for a in anchor_sizes), ((0.5, 1.0, 2.0),) * 5)
    det_args["box_head"] = TwoMLPHead(fpn_channels * 7 * 7, representation_size)
    det_args["box_predictor"] = FastRCNNPredictor(representation_size, num_classes + 1)
    if head == "mask_rcnn":
        det_args["mask_head"] = MaskRCNNHeads(fpn_channels, [mask_channels] * 4, 1)
        det_args["mask_predictor"] = MaskRCNNPredictor(mask_channels, mask_channels, num_classes + 1)
    det_args.update(detector_kwargs or {})
    model = cls(body, num_classes=None, **det_args)
    model.num_classes = num_classes
    model.no_weight_decay = types.MethodType(no_weight_decay_names, model)  # for timm's optimizer factory
    return model
