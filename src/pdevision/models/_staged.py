"""The staged-backbone base shared by the model families (``stem -> stages -> norm -> head``, timm's model API)
and its helpers: argument and input validation, feature-map sizes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from timm.layers import trunc_normal_
from timm.models import build_model_with_cfg
from timm.models._features import FeatureHookNet, feature_take_indices
from timm.models._features_fx import FeatureGraphNet
from torch import nn

from pdevision._values import is_integer_scalar
from pdevision.models._weights import check_release_offline, resolve_local_head


def to_2tuple_size(size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``224 -> (224, 224)``; a pair is returned as a tuple of ints. Anything else (a string, a float, a size of 0 or
    less) is a ``ValueError`` naming it."""
    pair = (size, size) if is_integer_scalar(size) else size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(is_integer_scalar(v) for v in pair):
        raise ValueError(f"an image size is an int or a (height, width) pair of ints, got {size!r}")
    if any(int(v) < 1 for v in pair):  # type: ignore[call-overload]
        raise ValueError(f"an image size must be positive, got {size!r}")
    return int(pair[0]), int(pair[1])  # type: ignore[call-overload]


def stage_widths(
    depths: list[int] | tuple[int, ...],
    dims: int | list[int] | tuple[int, ...],
    in_chans: int,
    num_classes: int,
    min_depth: int = 0,
) -> list[int]:
    """The channels of each stage (an int ``dims`` doubles per stage), after checking the architecture arguments
    that a staged backbone shares; a ``ValueError`` names the one that is wrong."""
    if len(depths) < 1 or any(not is_integer_scalar(d) or d < min_depth for d in depths):
        raise ValueError(f"depths must be a non-empty list of block counts >= {min_depth}, got {depths!r}")
    if not is_integer_scalar(in_chans) or in_chans < 1:
        raise ValueError(f"in_chans must be a positive number of input channels, got {in_chans!r}")
    if not is_integer_scalar(num_classes) or num_classes < 0:
        raise ValueError(f"num_classes must be 0 (no classifier) or more, got {num_classes!r}")
    widths = [dims * 2**i for i in range(len(depths))] if is_integer_scalar(dims) else list(dims)  # type: ignore[operator]
    if len(widths) != len(depths):
        raise ValueError(f"dims and depths need one entry per stage, got {len(widths)} and {len(depths)}")
    if any(not is_integer_scalar(d) or d < 1 for d in widths):
        raise ValueError(f"dims must be positive channel counts, got {widths!r}")
    return [int(d) for d in widths]


def conv_out_size(size: int, times: int) -> int:
    """Spatial size after ``times`` 3x3 stride-2 convolutions with padding 1 (``ceil`` halving)."""
    for _ in range(times):
        size = math.ceil(size / 2)
    return size


def check_image_batch(x: torch.Tensor, in_chans: int, min_size: int) -> torch.Tensor:
    """``x`` itself; raise ``ValueError`` naming expected and actual shape unless ``x`` is ``(B, in_chans, H, W)``
    with ``H, W >= min_size``. (Returning ``x`` keeps the check in FX graphs, whose dead-code pass would drop a
    call whose result is unused.)"""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"expected a torch.Tensor of shape (batch, {in_chans}, height, width), got {type(x)}")
    if x.ndim != 4:
        raise ValueError(
            f"expected a 4-D tensor of shape (batch, {in_chans}, height, width), got {x.ndim}-D shape {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"expected a floating-point image tensor, got {x.dtype} (for 8-bit images: x.float() / 255)")
    if x.shape[1] != in_chans:
        raise ValueError(
            f"expected {in_chans} input channels, shape (batch, {in_chans}, height, width), "
            f"got {x.shape[1]} channels in shape {tuple(x.shape)}"
        )
    if x.shape[2] < min_size or x.shape[3] < min_size:
        raise ValueError(
            f"expected height and width of at least {min_size} (the network's total stride), "
            f"got {x.shape[2]}x{x.shape[3]} in shape {tuple(x.shape)}"
        )
    return x


# A leaf of torch.fx graphs (torchvision's create_feature_extractor, timm's feature_cls="fx"): its checks
# read concrete shapes, which a symbolic trace does not have. The calls still run when the graph runs.
torch.fx.wrap("check_image_batch")


def _to_nchw(y: torch.Tensor) -> torch.Tensor:
    return y.permute(0, 3, 1, 2).contiguous()


class _NCHWFeatures(nn.Module):
    """Mixin for timm's feature wrappers that tap the stage modules themselves (forward hooks, FX): a backbone whose
    stages run NHWC has its maps permuted to NCHW, so ``features_only`` gives NCHW maps whichever ``feature_cls``
    is used, as ``forward_intermediates`` and timm's CNNs do."""

    def __init__(self, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        nhwc = getattr(model, "output_fmt", "NCHW") == "NHWC"
        kwargs["output_fmt"] = "NCHW"
        super().__init__(model, *args, **kwargs)
        self.stage_fmt = "NHWC" if nhwc else "NCHW"

    def forward(self, x: torch.Tensor) -> Any:
        out = super().forward(x)
        if self.stage_fmt == "NCHW":
            return out
        if isinstance(out, dict):
            return type(out)((k, _to_nchw(v)) for k, v in out.items())
        return [_to_nchw(v) for v in out]


class NCHWFeatureHookNet(_NCHWFeatures, FeatureHookNet):
    """timm's ``FeatureHookNet`` (``feature_cls="hook"``) returning NCHW maps."""


class NCHWFeatureGraphNet(_NCHWFeatures, FeatureGraphNet):
    """timm's ``FeatureGraphNet`` (``feature_cls="fx"``) returning NCHW maps."""


_FEATURE_CLS = {"getter": "getter", "hook": NCHWFeatureHookNet, "fx": NCHWFeatureGraphNet}


def feature_cfg(out_indices: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """timm's ``feature_cfg`` for a staged backbone: ``features_only`` maps are NCHW whichever ``feature_cls``
    is asked for (``"getter"``, the default, ``"hook"`` or ``"fx"``). Takes ``feature_cls`` out of ``kwargs``
    when ``features_only`` is set; timm's ``"list"`` / ``"dict"`` wrappers, which need the stages as direct
    children of the model, are a ``ValueError`` naming the ones that work."""
    cls: Any = kwargs.pop("feature_cls", "getter") if kwargs.get("features_only") else "getter"
    if isinstance(cls, str):
        name = "hook" if "hook" in cls.lower() else cls.lower()
        if name not in _FEATURE_CLS:
            raise ValueError(f"feature_cls must be 'getter' (the default), 'hook' or 'fx' for this model, got {cls!r}")
        cls = _FEATURE_CLS[name]
    elif cls is FeatureHookNet:
        cls = NCHWFeatureHookNet
    elif cls is FeatureGraphNet:
        cls = NCHWFeatureGraphNet
    return dict(out_indices=out_indices, feature_cls=cls)


def create_staged(
    cls: type[nn.Module],
    variant: str,
    pretrained: bool = False,
    filter_fn: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None,
    **kwargs: Any,
) -> Any:
    """The one factory of every staged family's registered models: timm's ``build_model_with_cfg`` for ``cls`` and
    the config ``variant``, with the family's ``filter_fn`` for foreign checkpoints, a trained head kept from a
    local weights file (:func:`~pdevision.models._weights.resolve_local_head`), released weights that cannot be
    had offline refused in one line (:func:`~pdevision.models._weights.check_release_offline`) and NCHW
    ``features_only`` maps for ``out_indices`` (:func:`feature_cfg`)."""
    out_indices = kwargs.pop("out_indices", (0, 1, 2, 3))
    kwargs = resolve_local_head(pretrained, kwargs)
    check_release_offline(variant, pretrained, kwargs)  # offline and not cached: one line, not a download attempt
    return build_model_with_cfg(
        cls,
        variant,
        pretrained,
        pretrained_filter_fn=filter_fn,
        feature_cfg=feature_cfg(out_indices, kwargs),
        **kwargs,
    )


def fold_submodules(module: nn.Module, sizes: dict[int, tuple[int, int]] | None = None) -> None:
    """timm's ``reparameterize_model`` walk over ``module``'s submodules, in place: a child with ``fuse()`` is
    replaced by its result, else its ``reparameterize()`` (or ``switch_to_deploy()``) runs, then the walk goes into
    the child. ``sizes`` maps ``id(child)`` to a size passed to that child's ``reparameterize`` (the stages of a
    model folded for another input size); without it the walk is timm's, call for call."""
    sizes = sizes or {}
    for name, child in module.named_children():
        if hasattr(child, "fuse"):
            setattr(module, name, child.fuse())
        elif hasattr(child, "reparameterize"):
            if id(child) in sizes:
                child.reparameterize(sizes[id(child)])
            else:
                child.reparameterize()
        elif hasattr(child, "switch_to_deploy"):
            child.switch_to_deploy()
        fold_submodules(child, sizes)


class StagedBackbone(nn.Module):
    """timm's model API for the families' common shape: ``stem -> stages -> norm -> head``.

    A family builds its modules one way, in its own ``__init__`` and in this order, as timm's ConvNeXt does::

        super().__init__(in_chans, num_classes, global_pool, depths, dims, output_fmt="NHWC")
        dpr = calculate_drop_path_rates(drop_path_rate, self.depths, stagewise=True)
        self.stem = ConvStem(in_chans, self.dims[0])  # NCHW, stride 4
        self.stages = nn.ModuleList(MyStage(...) for i in range(len(self.depths)))  # 2x down, then blocks
        self.norm = nn.LayerNorm(self.num_features)
        self.head = ClassifierHead(self.num_features, num_classes, pool_type=global_pool, input_fmt="NHWC")
        self.apply(self.init_linear)

    This ``__init__`` checks and records what every family shares: ``dims`` (the per-stage widths; an int doubles
    per stage), ``depths``, ``in_chans``, ``num_classes``, ``global_pool``, ``num_features``, ``output_fmt``
    (``"NHWC"`` when the stages run channels-last, the stem's NCHW output then permuted, else ``"NCHW"``),
    ``min_input_size`` and ``feature_info`` (stride 4 after the stem, then 2 per stage, modules ``stages.<i>``).
    Each stage has a ``grad_checkpointing`` flag; ``head`` is a timm ``ClassifierHead``. ``forward_intermediates``
    always returns NCHW maps unless asked for NHWC, and ``features_only`` wrappers return NCHW maps whichever
    ``feature_cls`` is used (see :func:`feature_cfg`). ``min_depth``: the fewest blocks a stage may have.
    """

    stem: nn.Module
    stages: nn.ModuleList
    norm: nn.Module
    head: nn.Module
    in_chans: int
    min_input_size: int
    num_classes: int
    output_fmt: str = "NHWC"
    grad_checkpointing: bool = False

    def __init__(
        self,
        in_chans: int,
        num_classes: int,
        global_pool: str,
        depths: list[int] | tuple[int, ...],
        dims: int | list[int] | tuple[int, ...],
        output_fmt: str = "NHWC",
        min_depth: int = 0,
    ) -> None:
        super().__init__()
        self.dims = stage_widths(depths, dims, in_chans, num_classes, min_depth)
        self.depths = [int(d) for d in depths]
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = self.dims[-1]
        self.output_fmt = output_fmt
        self.min_input_size = 4 * 2 ** (len(self.depths) - 1)
        self.grad_checkpointing = False
        self.feature_info = [dict(num_chs=d, reduction=4 * 2**i, module=f"stages.{i}") for i, d in enumerate(self.dims)]

    @staticmethod
    def init_linear(m: nn.Module) -> None:
        """Truncated-normal (std 0.02) linear weights and zero biases, as Swin / vHeat initialise them."""
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def stage_feature_size(self, index: int, img_size: tuple[int, int]) -> tuple[int, int]:
        """The feature-map size of stage ``index`` for an ``img_size`` image (stride 4, then 2 per stage)."""
        return conv_out_size(img_size[0], 2 + index), conv_out_size(img_size[1], 2 + index)

    @torch.no_grad()
    def reparameterize(self, img_size: int | tuple[int, int] | None = None) -> None:
        """Inference folding, in place: every submodule's own ``reparameterize`` hook, called by the walk of timm's
        ``reparameterize_model`` (:func:`fold_submodules`), so that ``timm.utils.model.reparameterize_model(model)``
        gives the same modules. The hooks fold what a family folds (vHeat: each stage's FVE projection into decay
        factors); the result is plain PyTorch (the CPU kernels are :func:`pdevision.fastpath.accelerate`'s).
        ``img_size`` (default: the training size) is the size the stages fold for."""
        size = to_2tuple_size(img_size) if img_size is not None else None
        sizes = {} if size is None else {id(s): self.stage_feature_size(i, size) for i, s in enumerate(self.stages)}
        fold_submodules(self, sizes)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups for timm's layer-wise learning-rate decay."""
        return dict(
            stem=r"^stem",
            blocks=r"^stages\.(\d+)" if coarse else [(r"^stages\.(\d+)\.blocks\.(\d+)", None), (r"^norm", (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable
        for stage in self.stages:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.head.reset(num_classes, pool_type=global_pool)

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        x = check_image_batch(x, self.in_chans, self.min_input_size)
        x = self.stem(x)
        return x.permute(0, 2, 3, 1) if self.output_fmt == "NHWC" else x

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Image batch ``(B, C, H, W)`` to the normalised last-stage features, in ``output_fmt``."""
        x = self._stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Stage outputs for ``indices`` (NCHW by default); with ``norm`` the final norm is applied to the last."""
        if output_fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        last = len(self.stages) - 1
        x = self._stem(x)
        stages = self.stages[: max_index + 1] if stop_early else self.stages
        intermediates = []
        i = 0
        for i, stage in enumerate(stages):
            x = stage(x)
            if i in take_indices:
                y = self.norm(x) if norm and i == last else x
                if output_fmt != self.output_fmt:
                    y = y.permute(0, 3, 1, 2).contiguous() if output_fmt == "NCHW" else y.permute(0, 2, 3, 1)
                intermediates.append(y)
        if intermediates_only:
            return intermediates
        if i == last:
            x = self.norm(x)
        return x, intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop stages after the last needed one (and the norm / head), for feature extraction."""
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        self.stages = self.stages[: max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "")
        return take_indices
