"""QB-Heat: masked image modelling from one visible block, with the heat prior as the predictor.

QB-Heat (Chen et al., "Self-Supervised Learning based on Heat Equation", arXiv:2211.13228): the encoder sees
one contiguous square block of the image (by default the centre block covering a quarter of the area), its
features are extrapolated over the whole image by ``dz/dx = A z, dz/dy = B z`` (:class:`HeatExtrapolator`), and
a light decoder maps the full feature grid to pixels; the loss is the mean squared error on per-patch
normalised pixels of the unseen region.

Layouts: images ``(B, 3, H, W)`` NCHW; the encoder runs on the crop ``(B, 3, block, block)`` only (it is cut
out before the encoder is called, so pixels outside the block cannot reach it); feature grids are NCHW with
one cell per ``stride x stride`` pixel patch.

Encoders (:mod:`pdevision.models.qbheat_encoders`): the source (a blog post on the paper) says that because the visible
part is one contiguous block, the encoder can be a Transformer or a plain CNN (unlike MAE's, which must be a
Transformer to drop patches); it gives no architecture details. Here the encoder is any registered backbone:

* a timm ViT (e.g. the one MAE pretrains, ``vit_tiny_patch16_224`` with ``patch_size=8``): the block's tokens with
  the position embeddings of their place in the image, reshaped to a feature grid; the stride is the patch size;
* any backbone with ``forward_intermediates`` (this library's families, timm's ConvNets such as ``resnet18``):
  its stages at the feature stride ``stride``. With ``fuse_deeper=True`` (default) the outputs of the deeper,
  coarser stages are projected (1x1 convolution) and bilinearly upsampled onto the ``stride`` grid and summed
  with it (a top-down, FPN-style sum), so every stage of the backbone, including the last one that a classifier
  pools, is trained; ``fuse_deeper=False`` uses the one stage at ``stride`` (then the deeper stages get no
  gradient).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from pdevision.layers.decoder import build_decoder, reconstruction_loss, to_pixels
from pdevision.layers.heat_extrapolator import HeatExtrapolator
from pdevision.models.factory import create_model, min_input_size
from pdevision.models.qbheat_encoders import block_features, encoder_kind

log = logging.getLogger(__name__)

POSITIONS = ("center", "random")
# The rate cap each constraint gets when none is given (max_rate="auto"): the library's skew-symmetric form is
# capped; constraint="none" is the published, unconstrained predictor, so it is uncapped unless a cap is given.
DEFAULT_MAX_RATE: dict[str, float | None] = {"skew": 0.25, "none": None}


def resolve_max_rate(constraint: str, max_rate: float | str | None) -> float | None:
    """The rate cap for ``constraint``: ``"auto"`` gives :data:`DEFAULT_MAX_RATE` (0.25 for ``"skew"``, no cap
    for ``"none"``, the published form); a number or ``None`` is used as given."""
    if isinstance(max_rate, str):
        if max_rate != "auto":
            raise ValueError(f"max_rate must be a positive number, None or 'auto', got {max_rate!r}")
        if constraint not in DEFAULT_MAX_RATE:
            raise ValueError(f"constraint must be one of {tuple(DEFAULT_MAX_RATE)}, got {constraint!r}")
        return DEFAULT_MAX_RATE[constraint]
    return max_rate


LOSS_REGIONS = ("unseen", "all")


def feature_strides(encoder: nn.Module) -> list[int]:
    """The reduction (stride) of each entry of ``encoder.feature_info``."""
    info = getattr(encoder, "feature_info", None)
    if not info:
        raise ValueError(f"{type(encoder).__name__} has no feature_info; QB-Heat needs forward_intermediates")
    return [int(f["reduction"]) for f in info]


def create_encoder(name: str, img_size: int, block_size: int, encoder_args: dict[str, Any]) -> tuple[nn.Module, dict]:
    """A registered backbone without classifier, built for ``img_size`` (the fine-tuning resolution) and able
    to run on the ``block_size`` crop. A timm ViT is built as is (its block tokens take the positions of their
    place in the image, :func:`pdevision.models.qbheat_encoders.vit_block_tokens`); other models with a
    ``dynamic_img_size`` switch get ``dynamic_img_size=True``. Returns it and its arguments."""
    args = dict(encoder_args)
    encoder = create_model(name, num_classes=0, img_size=img_size, **args)
    if (
        block_size != img_size
        and not isinstance(encoder, VisionTransformer)
        and getattr(encoder, "dynamic_img_size", None) is False
    ):
        args["dynamic_img_size"] = True
        encoder = create_model(name, num_classes=0, img_size=img_size, **args)
    return encoder, args


class QBHeat(nn.Module):
    """QB-Heat pretraining model (arXiv:2211.13228): encoder on the visible block, heat predictor, pixel decoder.

    Args:
        encoder: a registered model name (built without classifier at ``img_size``) or a module: a timm ViT
            (built at ``img_size``, patch size ``stride``) or a backbone with ``forward_intermediates``
            (see :mod:`pdevision.models.qbheat_encoders`); anything else is a one-line :class:`ValueError`.
        img_size: image side in pixels (a multiple of ``stride``).
        block_size: side of the visible square block in pixels (default ``img_size // 2``: a quarter of the
            area); a multiple of ``stride``, smaller than the image, at least the encoder's minimum input.
        block_position: ``"center"`` or ``"random"`` (uniform over cell-aligned positions, one per batch).
        stride: feature stride used for prediction (must be one of the encoder's feature strides).
        pred_dim: channels of the predicted features (encoder features are projected to it).
        predictor: the extrapolation rule, see :class:`HeatExtrapolator`.
        corner: the order of the corner cells, see :class:`HeatExtrapolator`.
        constraint: the form of ``A`` and ``B``, see :class:`HeatExtrapolator`.
        max_rate: cap on ``dx ||A||_2`` (see :class:`HeatExtrapolator`); ``"auto"`` (default): 0.25 with
            ``constraint="skew"``, no cap with ``constraint="none"``, so ``constraint="none"`` alone is the
            published predictor (``A = W_A`` free and uncapped); a number caps either form, ``None`` uncaps.
        fuse_deeper: add the deeper stages' features onto the ``stride`` grid (see the module docstring).
        decoder: the pixel decoder's kind (:mod:`pdevision.layers.decoder`).
        decoder_width: the pixel decoder's width.
        decoder_depth: the pixel decoder's depth.
        decoder_heads: the pixel decoder's attention heads.
        loss_region: ``"unseen"`` (cells outside the block) or ``"all"``.
        norm_pix: per-patch normalised pixel targets.
        encoder_args: extra arguments for building ``encoder`` by name.
    """

    def __init__(
        self,
        encoder: str | nn.Module = "vheat_micro",
        img_size: int = 64,
        block_size: int | None = None,
        block_position: str = "center",
        stride: int = 8,
        pred_dim: int = 128,
        predictor: str = "discrete",
        corner: str = "mean",
        constraint: str = "skew",
        max_rate: float | str | None = "auto",
        fuse_deeper: bool = True,
        decoder: str = "transformer",
        decoder_width: int = 128,
        decoder_depth: int = 2,
        decoder_heads: int = 4,
        loss_region: str = "unseen",
        norm_pix: bool = True,
        encoder_args: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        block_size = img_size // 2 if block_size is None else block_size
        if block_position not in POSITIONS:
            raise ValueError(f"block position must be one of {POSITIONS}, got {block_position!r}")
        if loss_region not in LOSS_REGIONS:
            raise ValueError(f"loss region must be one of {LOSS_REGIONS}, got {loss_region!r}")
        if img_size % stride:
            raise ValueError(f"image size {img_size} must be a multiple of the feature stride {stride}")
        if block_size % stride or block_size <= 0:
            raise ValueError(f"block size {block_size} must be a positive multiple of the feature stride {stride}")
        if block_size >= img_size:
            raise ValueError(
                f"the visible block ({block_size} px) must be smaller than the image ({img_size} px); "
                f"the default is half the side ({img_size // 2} px, a quarter of the area)"
            )
        self.encoder_name = encoder if isinstance(encoder, str) else type(encoder).__name__
        if isinstance(encoder, str):
            encoder, self.encoder_args = create_encoder(encoder, img_size, block_size, encoder_args or {})
        else:
            self.encoder_args = dict(encoder_args or {})
        self.encoder_kind = encoder_kind(encoder, self.encoder_name, img_size, stride)
        smallest = min_input_size(encoder)
        if block_size < smallest:
            raise ValueError(
                f"the visible block ({block_size} px) is below {self.encoder_name}'s minimum input of {smallest} px; "
                f"use a larger --block-size or --img-size"
            )
        if self.encoder_kind == "tokens":  # one token grid at the patch size (= stride), the final norm's output
            self.indices, channels = [], [int(encoder.embed_dim)]
        else:
            strides = feature_strides(encoder)
            if stride not in strides:
                raise ValueError(
                    f"{self.encoder_name} has feature strides {sorted(set(strides))}; --stride {stride} is not one"
                )
            # the last feature entry of each distinct stride >= ``stride`` (only ``stride`` without fusion)
            last_of = {r: i for i, r in enumerate(strides)}
            self.indices = sorted(i for r, i in last_of.items() if r >= stride) if fuse_deeper else [last_of[stride]]
            channels = [int(encoder.feature_info[i]["num_chs"]) for i in self.indices]
        self.encoder = encoder
        self.img_size, self.block_size, self.block_position, self.stride = img_size, block_size, block_position, stride
        self.loss_region, self.norm_pix = loss_region, norm_pix
        self.proj = nn.ModuleList(nn.Conv2d(c, pred_dim, 1) for c in channels)
        self.predictor = HeatExtrapolator(
            pred_dim, predictor, corner, constraint, resolve_max_rate(constraint, max_rate)
        )
        self.decoder = build_decoder(decoder, pred_dim, stride, decoder_width, decoder_depth, decoder_heads)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        inner = self.encoder.no_weight_decay() if hasattr(self.encoder, "no_weight_decay") else set()
        return {f"encoder.{k}" for k in inner}

    def encode(
        self, crop: torch.Tensor, offset: tuple[int, int] | None = None, grid: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """The visible block ``(B, 3, block, block)`` to features ``(B, pred_dim, block / stride, block / stride)``.

        ``offset`` (top, left) and ``grid`` in cells place the block in the image (a ViT encoder takes its
        positions from them); default: the centre of an ``img_size`` image."""
        cells = self.block_size // self.stride
        if grid is None:
            grid = (self.img_size // self.stride, self.img_size // self.stride)
        if offset is None:
            offset = ((grid[0] - cells) // 2, (grid[1] - cells) // 2)
        feats = block_features(self.encoder, self.encoder_kind, crop, self.indices, offset, grid)
        out = None
        for proj, f in zip(self.proj, feats, strict=True):
            f = proj(f)
            if f.shape[-2:] != (cells, cells):
                f = F.interpolate(f, size=(cells, cells), mode="bilinear", align_corners=False)
            out = f if out is None else out + f
        assert out is not None
        return out

    def sample_offset(self, grid: tuple[int, int]) -> tuple[int, int]:
        """The block's ``(top, left)`` cell: centred, or uniform over all positions (global torch RNG)."""
        cells = self.block_size // self.stride
        if self.block_position == "center" or not self.training:
            return (grid[0] - cells) // 2, (grid[1] - cells) // 2
        top = int(torch.randint(0, grid[0] - cells + 1, ()).item())
        left = int(torch.randint(0, grid[1] - cells + 1, ()).item())
        return top, left

    def hidden_mask(self, grid: tuple[int, int], offset: tuple[int, int], device: torch.device) -> torch.Tensor:
        """``(gh * gw,)`` raster-order mask of the cells outside the visible block (1) and inside it (0)."""
        cells = self.block_size // self.stride
        mask = torch.ones(grid, device=device)
        mask[offset[0] : offset[0] + cells, offset[1] : offset[1] + cells] = 0
        return mask.flatten()

    def forward(self, images: torch.Tensor, offset: tuple[int, int] | None = None) -> dict[str, Any]:
        """``images`` ``(B, 3, H, W)`` NCHW to ``loss``, ``prediction`` (patches ``(B, N, s * s * 3)``),
        ``hidden`` ``(N,)`` and the block ``offset`` (top, left) in cells."""
        b, _, height, width = images.shape
        s = self.stride
        if height % s or width % s or height <= self.block_size or width <= self.block_size:
            raise ValueError(
                f"images of {height}x{width} px do not fit QB-Heat (multiples of the stride {s}, "
                f"larger than the {self.block_size} px block)"
            )
        grid = (height // s, width // s)
        if self.encoder_kind == "tokens" and not getattr(self.encoder, "dynamic_img_size", False):
            if grid != tuple(int(g) for g in self.encoder.patch_embed.grid_size):
                raise ValueError(
                    f"{self.encoder_name} was built for {self.img_size} px images (its position embeddings), "
                    f"got {height}x{width} px"
                )
        top, left = offset if offset is not None else self.sample_offset(grid)
        crop = images[:, :, top * s : top * s + self.block_size, left * s : left * s + self.block_size]
        z = self.encode(crop, (top, left), grid)
        full = self.predictor(z, grid, (top, left))
        prediction = self.decoder(full)
        hidden = self.hidden_mask(grid, (top, left), images.device)
        weight = hidden.expand(b, -1) if self.loss_region == "unseen" else None
        loss = reconstruction_loss(prediction, images, s, weight, self.norm_pix)
        return {"loss": loss, "prediction": prediction, "hidden": hidden, "offset": (top, left)}

    @torch.no_grad()
    def reconstruct(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """For display: ``visible`` (the block, zeros elsewhere), ``prediction`` (predicted pixels, the visible
        block pasted in) and ``target``, all ``(B, 3, H, W)`` in the normalised input space."""
        out = self(images)
        s, (top, left) = self.stride, out["offset"]
        keep = torch.zeros_like(images[:, :1])
        keep[..., top * s : top * s + self.block_size, left * s : left * s + self.block_size] = 1
        pixels = to_pixels(out["prediction"].float(), images, s, self.norm_pix)
        return {"visible": images * keep, "prediction": pixels * (1 - keep) + images * keep, "target": images}
