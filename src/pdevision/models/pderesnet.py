"""PDE-ResNet: ConvNets built from quasi-linear hyperbolic systems (Liu et al., "A Novel Convolutional Neural
Network Architecture with a Continuous Symmetry", arXiv:2308.01621).

Layout: NCHW throughout; ``forward_features`` and ``forward_intermediates`` return NCHW.

ResNet-50's plan: a 7x7 stem (stride 4), stages of ``[3, 4, 6, 3]`` blocks with 64-128-256-512 channels in
the residual stream, global average pooling, a linear head. Every block is a
:class:`~pdevision.layers.hyperbolic.HyperbolicBlock` (one Euler step of Eq. 3 or a variant). The first block
of each stage is the downsampling block (stride 1 in stage 0, else 2; 1x1 projection shortcut) and carries the
stage's only activation (``hardtanh``, ``hardball``, ``softball``; ``"relu@all"`` puts a ReLU after every
block instead, ``"none"`` leaves the stages linear up to the products).

Parameter counts at 100 classes (``num_classes=100``), against the paper's Table 1 (tested):

=============================== ============ =========== ================================
 model                           this library  Table 1     row
=============================== ============ =========== ================================
 ``pderesnet50``                 8.61M        8.61M       Eq.(3), softball@ds
 ``pderesnet50_noshare``         8.73M        8.73M       Eq.(3) (no ws)
 ``pderesnet50_noshare_x6``      12.98M       13.0M       Eq.(3) (no ws, x6)
 ``pderesnet50_eq4``             5.70M        5.70M       Eq.(4)
 ``pderesnet50_eq5``             4.27M        4.26M       Eq.(5)
 ``pderesnet50_eq6``             5.61M        5.61M       Eq.(6)
 ``pderesnet50_eq7_noshare_x6``  12.98M       13.0M       Eq.(7) (no ws, x6)
=============================== ============ =========== ================================

What the paper leaves open in Eqs. (4)-(7) and how it is filled is stated in :mod:`pdevision.layers.hyperbolic`.
The activations of the Eq.(5)-(7) rows are not printed in Table 1; softball@ds is used (the rows above them).
``pderesnet50_mix``, ``_mix_cons``, ``_coef_grad`` are this library's channel-mix variants (not in the paper).

Table 1 rows at any scale: ``timm.create_model("pderesnet_micro", table1_row="eq7_noshare_x6")`` (or any
name of :data:`TABLE1_ROWS`) sets ``equation``, ``shared``, ``expansion`` and ``activation`` of that row; the
four arguments can also be given one by one (``equation=`` any of :data:`pdevision.layers.EQUATIONS`).

Which weight symmetry acts on which model: :func:`pdevision.symmetry.stage_groups` (table in
:mod:`pdevision.symmetry`).

Training guard: with ``check_finite=True`` (a constructor argument and an attribute) every block's output
is checked and a ``FloatingPointError`` names the first block whose output became non-finite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.checkpoint
from timm.layers import ClassifierHead, calculate_drop_path_rates
from timm.models import generate_default_cfgs, register_model
from torch import nn

from pdevision.layers.blocks import run_block
from pdevision.layers.hyperbolic import (
    ACTIVATIONS,
    EQUATIONS,
    HyperbolicBlock,
    ResNetStem,
    create_activation,
    init_hyperbolic_weights,
)
from pdevision.models._arguments import check_rate
from pdevision.models._staged import StagedBackbone, check_image_batch, create_staged
from pdevision.models._weights import default_cfg

torch.fx.wrap("check_image_batch")  # a leaf of FX graphs (see pdevision.models._staged)

__all__ = ["TABLE1_ROWS", "PDEResNet", "PDEResNetStage"]

# The rows of the paper's Table 1 (arXiv:2308.01621) as model arguments. "@ds": the activation only at each
# stage's downsampling block; "@all": after every block. Rows Eq.(5)-(7) print no activation: softball@ds.
TABLE1_ROWS: dict[str, dict[str, Any]] = {
    "eq3_relu@all": dict(equation="eq3", shared=True, expansion=4, activation="relu@all"),
    "eq3_hardtanh@ds": dict(equation="eq3", shared=True, expansion=4, activation="hardtanh"),
    "eq3_hardball@ds": dict(equation="eq3", shared=True, expansion=4, activation="hardball"),
    "eq3_softball@ds": dict(equation="eq3", shared=True, expansion=4, activation="softball"),
    "eq3_noshare": dict(equation="eq3", shared=False, expansion=4, activation="softball"),
    "eq3_noshare_x6": dict(equation="eq3", shared=False, expansion=6, activation="softball"),
    "eq4": dict(equation="eq4", shared=True, expansion=4, activation="softball"),
    "eq5": dict(equation="eq5", shared=True, expansion=4, activation="softball"),
    "eq6": dict(equation="eq6", shared=True, expansion=4, activation="softball"),
    "eq7_noshare_x6": dict(equation="eq7", shared=False, expansion=6, activation="softball"),
}


def _nonfinite(where: str) -> FloatingPointError:
    return FloatingPointError(
        f"non-finite activations first appeared in {where} (its input was finite). The paper reports such "
        f"sudden NaN outputs when activations are not clipped: use activation='hardtanh', 'hardball' or "
        f"'softball', a lower learning rate, or gradient clipping"
    )


class PDEResNetStage(nn.Module):
    """A downsampling block (projection shortcut, the stage activation) then ``depth - 1`` blocks. NCHW."""

    def __init__(
        self,
        index: int,
        in_chs: int,
        dim: int,
        depth: int,
        stride: int,
        equation: str = "eq3",
        expansion: int = 4,
        shared: bool = True,
        activation: str = "softball",
        drop_path: Sequence[float] = (),
    ) -> None:
        super().__init__()
        self.index = index
        self.grad_checkpointing = False
        self.check_finite = False
        dpr = list(drop_path) or [0.0] * depth
        blocks = []
        for j in range(depth):
            every = activation == "relu@all"
            blocks.append(
                HyperbolicBlock(
                    in_chs if j == 0 else dim,
                    dim,
                    stride=stride if j == 0 else 1,
                    equation=equation,
                    expansion=expansion,
                    shared=shared,
                    act_layer=create_activation(activation) if j == 0 or every else None,
                    projection=j == 0,
                    drop_path=dpr[j],
                )
            )
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for j, block in enumerate(self.blocks):
            x = run_block(block, x, checkpointing=self.grad_checkpointing)
            if self.check_finite and not bool(torch.isfinite(x).all()):
                raise _nonfinite(f"stages.{self.index}.blocks.{j}")
        return x


class PDEResNet(StagedBackbone):
    """PDE-ResNet backbone: ResNet stem, hyperbolic stages, pooled linear head.

    Args:
        in_chans: input channels.
        num_classes: classifier outputs (0 for no classifier).
        global_pool: pooling of the head (timm's ``ClassifierHead``).
        depths: blocks per stage.
        dims: channels of each stage's residual stream, or the first stage's (doubled per stage).
        stem_width: channels out of the stem (default ``dims[0]``).
        equation: the paper's ``"eq3"`` ... ``"eq7"`` or a library variant ``"mix"``, ``"mix_cons"``,
            ``"coef_grad"`` (:mod:`pdevision.layers.hyperbolic`).
        expansion: hidden channels per block as a multiple of its input (4, or 6 for "x6").
        shared: one bank of 3x3 derivative kernels for all channels ("ws"), or per-channel kernels.
        activation: the downsampling blocks' activation, one of ``"none"``, ``"relu"``, ``"hardtanh"``,
            ``"hardball"``, ``"softball"``, or ``"relu@all"`` (a ReLU after every block).
        drop_rate: dropout before the classifier.
        drop_path_rate: stochastic depth, linearly increasing over blocks.
        zero_init_last: start every block as its shortcut (last BatchNorm scale 0).
        check_finite: raise ``FloatingPointError`` naming the first block with a non-finite output.
    """

    def __init__(
        self,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        depths: Sequence[int] = (3, 4, 6, 3),
        dims: int | Sequence[int] = 64,
        stem_width: int | None = None,
        equation: str = "eq3",
        expansion: int = 4,
        shared: bool = True,
        activation: str = "softball",
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        zero_init_last: bool = True,
        check_finite: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"PDEResNet got unexpected arguments: {sorted(kwargs)}")
        drop_path_rate = check_rate(drop_path_rate)
        if equation not in EQUATIONS:
            raise ValueError(f"equation must be one of {EQUATIONS}, got {equation!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        # each stage opens with its downsampling block, so every stage has one block at least
        super().__init__(in_chans, num_classes, global_pool, depths, dims, output_fmt="NCHW", min_depth=1)
        self.equation, self.expansion, self.shared, self.activation = equation, expansion, shared, activation
        stem_width = stem_width or self.dims[0]
        dpr = calculate_drop_path_rates(drop_path_rate, self.depths, stagewise=True)

        self.stem = ResNetStem(in_chans, stem_width)
        self.stages = nn.ModuleList(
            PDEResNetStage(
                i,
                self.dims[i - 1] if i > 0 else stem_width,
                self.dims[i],
                self.depths[i],
                stride=1 if i == 0 else 2,
                equation=equation,
                expansion=expansion,
                shared=shared,
                activation=activation,
                drop_path=dpr[i],
            )
            for i in range(len(self.depths))
        )
        self.norm = nn.Identity()  # no final norm: the last stage's BatchNorm ends the trunk
        self.head = ClassifierHead(self.num_features, num_classes, pool_type=global_pool, drop_rate=drop_rate)
        init_hyperbolic_weights(self)
        if zero_init_last:
            for m in self.modules():
                if isinstance(m, HyperbolicBlock):
                    m.zero_init_last()
        self.check_finite = check_finite

    # -- training guard and folding ---------------------------------------------------------------
    @property
    def check_finite(self) -> bool:
        return self._check_finite

    @check_finite.setter
    def check_finite(self, enable: bool) -> None:
        self._check_finite = bool(enable)
        for stage in self.stages:
            stage.check_finite = self._check_finite

    @property
    def folded(self) -> bool:
        """Whether every BatchNorm has been folded (:meth:`fold_batchnorm`)."""
        return self.stem.folded and all(b.folded for s in self.stages for b in s.blocks)

    @torch.no_grad()
    def fold_batchnorm(self) -> None:
        """Fold every BatchNorm into its neighbouring convs, in place (use in eval mode; see
        :func:`pdevision.symmetry.fold_batchnorm` for a folded copy)."""
        self.stem.fold_batchnorm()
        for stage in self.stages:
            for block in stage.blocks:
                block.fold_batchnorm()

    # -- timm model API -------------------------------------------------------------------------
    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        return dict(stem=r"^stem", blocks=r"^stages\.(\d+)" if coarse else r"^stages\.(\d+)\.blocks\.(\d+)")

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        x = check_image_batch(x, self.in_chans, self.min_input_size)
        if self._check_finite and not bool(torch.isfinite(x).all()):
            raise FloatingPointError("the input images contain NaN or inf values")
        x = self.stem(x)
        if self._check_finite and not bool(torch.isfinite(x).all()):
            raise _nonfinite("stem")
        return x


# -- registry ------------------------------------------------------------------------------------


def _apply_table1_row(kwargs: dict[str, Any]) -> dict[str, Any]:
    row = kwargs.pop("table1_row", None)
    if row is None:
        return kwargs
    if row not in TABLE1_ROWS:
        raise ValueError(f"table1_row must be one of {sorted(TABLE1_ROWS)}, got {row!r}")
    return {**kwargs, **TABLE1_ROWS[row]}


def _cfg(**kwargs: Any) -> dict[str, Any]:
    return default_cfg(interpolation="bilinear", first_conv="stem.conv", paper_ids="arXiv:2308.01621", **kwargs)


_R50 = dict(depths=(3, 4, 6, 3), dims=(64, 128, 256, 512))
_R50_NAMES = (
    "pderesnet50",
    "pderesnet50_hardtanh",
    "pderesnet50_hardball",
    "pderesnet50_relu",
    "pderesnet50_noshare",
    "pderesnet50_noshare_x6",
    "pderesnet50_eq4",
    "pderesnet50_eq5",
    "pderesnet50_eq6",
    "pderesnet50_eq7",
    "pderesnet50_eq7_noshare_x6",
    "pderesnet50_mix",
    "pderesnet50_mix_cons",
    "pderesnet50_coef_grad",
)

default_cfgs = generate_default_cfgs(
    {
        "pderesnet_micro.untrained": _cfg(input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0),
        **{f"{name}.untrained": _cfg() for name in _R50_NAMES},
    }
)


def _r50(variant: str, pretrained: bool, kwargs: dict[str, Any], **args: Any) -> PDEResNet:
    return create_staged(PDEResNet, variant, pretrained, **_apply_table1_row({**_R50, **args, **kwargs}))


@register_model
def pderesnet_micro(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-Micro (this library's CPU-sized model): Eq. 3, dims 16-32-64-128, depths 1-2-2-1, softball;
    for 32-64 px inputs, tests and demos.

    Ablation arguments (``timm.create_model("pderesnet_micro", **args)``): ``table1_row`` (a name of
    :data:`TABLE1_ROWS`, e.g. ``"eq4"``, ``"eq3_hardtanh@ds"``, ``"eq7_noshare_x6"``), or one by one
    ``equation`` (``"eq3"`` ... ``"eq7"``, ``"mix"``, ``"mix_cons"``, ``"coef_grad"``), ``shared`` (False: "no ws"),
    ``expansion`` (6: "x6"), ``activation`` (``"relu@all"``, ``"hardtanh"``, ``"hardball"``, ``"softball"``,
    ``"none"``)."""
    args = dict(depths=(1, 2, 2, 1), dims=(16, 32, 64, 128))
    return create_staged(PDEResNet, "pderesnet_micro", pretrained, **_apply_table1_row({**args, **kwargs}))


@register_model
def pderesnet50(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50: Eq. 3, shared 3x3 bank, x4, softball at downsampling (8.61M parameters at 100 classes)."""
    return _r50("pderesnet50", pretrained, kwargs)


@register_model
def pderesnet50_hardtanh(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with hardtanh (clip at +-1) at the downsampling blocks."""
    return _r50("pderesnet50_hardtanh", pretrained, kwargs, activation="hardtanh")


@register_model
def pderesnet50_hardball(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with hardball (projection onto the ball of radius sqrt(n)) at the downsampling blocks."""
    return _r50("pderesnet50_hardball", pretrained, kwargs, activation="hardball")


@register_model
def pderesnet50_relu(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with a ReLU after every block ("relu@all", the ablation)."""
    return _r50("pderesnet50_relu", pretrained, kwargs, activation="relu@all")


@register_model
def pderesnet50_noshare(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with per-channel 3x3 kernels ("no ws", 8.73M parameters at 100 classes)."""
    return _r50("pderesnet50_noshare", pretrained, kwargs, shared=False)


@register_model
def pderesnet50_noshare_x6(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, no ws, expansion 6 (12.98M parameters at 100 classes; the paper: 13.0M)."""
    return _r50("pderesnet50_noshare_x6", pretrained, kwargs, shared=False, expansion=6)


@register_model
def pderesnet50_eq4(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, the paper's Eq. (4), ``(C u)_i (A du)_i`` (5.70M parameters at 100 classes; Table 1: 5.70M)."""
    return _r50("pderesnet50_eq4", pretrained, kwargs, equation="eq4")


@register_model
def pderesnet50_eq5(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, the paper's Eq. (5), ``(C u)_i du_i`` without ``A`` (4.27M at 100 classes; Table 1: 4.26M)."""
    return _r50("pderesnet50_eq5", pretrained, kwargs, equation="eq5")


@register_model
def pderesnet50_eq6(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, the paper's Eq. (6), ``A d[u_j (C u)_j]`` (5.61M at 100 classes; Table 1: 5.61M)."""
    return _r50("pderesnet50_eq6", pretrained, kwargs, equation="eq6")


@register_model
def pderesnet50_eq7(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, the paper's Eq. (7), ``A_a d_a[u_j (C_a u)_j]``, shared 3x3 bank, x4 (8.61M; Table 1 lists
    Eq. (7) only as no ws, x6: :func:`pderesnet50_eq7_noshare_x6`)."""
    return _r50("pderesnet50_eq7", pretrained, kwargs, equation="eq7")


@register_model
def pderesnet50_eq7_noshare_x6(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50, Eq. (7), per-channel 3x3 kernels, expansion 6 (12.98M at 100 classes; Table 1: 13.0M)."""
    return _r50("pderesnet50_eq7_noshare_x6", pretrained, kwargs, equation="eq7", shared=False, expansion=6)


@register_model
def pderesnet50_mix(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with this library's ``mix`` block ``A_a[(D u) * K_a(C u)]`` (not a paper equation): the
    stream is read by 1x1 convs only, so O(n) acts with softball (GL(n) without activation)."""
    return _r50("pderesnet50_mix", pretrained, kwargs, equation="mix")


@register_model
def pderesnet50_mix_cons(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with this library's ``mix_cons`` block ``A_a K_a[(C u) * (D u)]`` (not a paper equation);
    O(n) acts with softball."""
    return _r50("pderesnet50_mix_cons", pretrained, kwargs, equation="mix_cons")


@register_model
def pderesnet50_coef_grad(pretrained: bool = False, **kwargs: Any) -> PDEResNet:
    """PDE-ResNet-50 with this library's ``coef_grad`` block ``A_a[u * K_a(C_a u)]`` (not a paper equation)."""
    return _r50("pderesnet50_coef_grad", pretrained, kwargs, equation="coef_grad")
