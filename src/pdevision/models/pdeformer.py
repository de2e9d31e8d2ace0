"""PDEFormer: timm's MetaFormer skeleton with a PDE operator as its token mixer.

timm's ``MetaFormer`` (the PoolFormer / ConvFormer / CAFormer skeleton of Yu et al., "MetaFormer Baselines for
Vision") is the skeleton; only the token mixer is chosen by name (``mixer=``):

======================  ================================================================================
``"heat"``              vHeat's Heat Conduction Operator (:class:`~pdevision.layers.mixers.HeatMixer`)
``"wave"``              WaveFormer's Wave Propagation Operator (:class:`~pdevision.layers.mixers.WaveMixer`)
``"hcl"``               HcNet's heat-conduction layer (:class:`~pdevision.layers.mixers.HcLMixer`)
``"hyperbolic"``        PDE-ResNet's hyperbolic step (:class:`~pdevision.layers.mixers.HyperbolicMixer`)
``"identity"``          no token mixing (MetaFormer's IdentityFormer)
``"pooling"``           average pooling minus identity (PoolFormer)
``"sepconv"``           inverted separable 7x7 convolution (ConvFormer)
``"attention"``         multi-head self-attention (the attention stages of CAFormer)
======================  ================================================================================

so that one skeleton, one recipe and one parameter budget can be held fixed while only the mixer changes
(``benchmarks/archive/mixers``). The mixer classes also plug into ``timm.models.metaformer.MetaFormer`` directly
(``token_mixers=HeatMixer``).

The one change to the skeleton is its stem (``stem=``): ``"conv"`` (the default) is vHeat's two 3x3 stride-2
convolutions (:class:`~pdevision.layers.ConvStem`), ``"patch"`` MetaFormer's own 7x7 stride-4 patch embedding. Both
reduce by 4 to ``dims[0]`` channels, so the stages, the feature maps and the head are the same. At this library's CPU
size the patch stem trained far worse with the identity, attention and separable-convolution mixers (one seed each;
``benchmarks/archive/mixers/mixers.md`` pairs the two stems).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.metaformer import Attention, GroupNorm1NoBias, LayerNormNoBias, MetaFormer, Pooling, SepConv
from torch import nn

from pdevision.layers import ConvStem
from pdevision.layers.mixers import HcLMixer, HeatMixer, HyperbolicMixer, WaveMixer
from pdevision.models._weights import default_cfg, resolve_local_head

__all__ = ["MIXERS", "PDE_MIXERS", "STEMS", "PDEFormer", "mixer_kwargs"]

MIXERS: dict[str, type[nn.Module]] = {
    "heat": HeatMixer,
    "wave": WaveMixer,
    "hcl": HcLMixer,
    "hyperbolic": HyperbolicMixer,
    "identity": nn.Identity,
    "pooling": Pooling,
    "sepconv": SepConv,
    "attention": Attention,
}
PDE_MIXERS: tuple[str, ...] = ("heat", "wave", "hcl", "hyperbolic")
STEMS: tuple[str, ...] = ("conv", "patch")


class PDEFormer(MetaFormer):
    """timm's :class:`~timm.models.metaformer.MetaFormer` with a choice of stem; every other argument is
    MetaFormer's.

    ``stem="conv"``: vHeat's two 3x3 stride-2 convolutions with LayerNorm and GELU (:class:`ConvStem`);
    ``stem="patch"``: MetaFormer's own 7x7 stride-4 convolution and norm. Both reduce by 4 and end at ``dims[0]``
    channels, so the stages, ``feature_info`` and the head do not change.
    """

    def __init__(self, *args: Any, stem: str = "conv", **kwargs: Any) -> None:
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {list(STEMS)}, got {stem!r}")
        super().__init__(*args, **kwargs)
        self.stem_type = stem
        if stem == "conv":
            conv = self.stem.conv
            self.stem = ConvStem(self.in_chans, conv.out_channels).to(
                device=conv.weight.device, dtype=conv.weight.dtype
            )


def mixer_kwargs(mixer: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the MetaFormer arguments that ``mixer`` needs added (token-layout norms for attention,
    PoolFormerV2's single-group GroupNorm for pooling, as timm's ``poolformerv2_*`` build it); an option that no
    mixer of the model takes is refused by timm's ``MetaFormer`` (``TypeError``)."""
    if mixer not in MIXERS:
        raise ValueError(f"mixer must be one of {sorted(MIXERS)}, got {mixer!r}")
    out = dict(kwargs)
    if mixer == "attention":  # timm's Attention runs on (B, N, C) tokens: its stages take token-layout norms
        out.setdefault("norm_layers", LayerNormNoBias)
    if mixer == "pooling":
        out.setdefault("norm_layers", GroupNorm1NoBias)
    return out


def _stage_dims(dims: int | Sequence[int], depths: Sequence[int]) -> tuple[int, ...]:
    if isinstance(dims, int):
        return tuple(dims * 2**i for i in range(len(depths)))
    if len(dims) != len(depths):  # MetaFormer indexed past the shorter one (IndexError)
        raise ValueError(f"dims and depths need one entry per stage, got {len(dims)} and {len(depths)}")
    return tuple(dims)


def _create_pdeformer(variant: str, pretrained: bool = False, mixer: str = "heat", **kwargs: Any) -> PDEFormer:
    out_indices = kwargs.pop("out_indices", (0, 1, 2, 3))
    kwargs = mixer_kwargs(mixer, kwargs)
    kwargs["dims"] = dims = _stage_dims(kwargs.get("dims", 32), kwargs.get("depths", (1, 1, 3, 1)))
    if mixer == "attention":  # timm's Attention maps back to the stage's width: heads must tile it
        head_dim = kwargs.setdefault("head_dim", min(32, dims[0]))
        if not isinstance(head_dim, int) or head_dim < 1 or any(d % head_dim for d in dims):
            raise ValueError(f"attention needs widths that are multiples of head_dim={head_dim!r}, got dims {dims}")
    kwargs = resolve_local_head(pretrained, kwargs)
    model = build_model_with_cfg(
        PDEFormer,
        variant,
        pretrained,
        token_mixers=MIXERS[mixer],
        feature_cfg=dict(flatten_sequential=True, out_indices=out_indices),
        **kwargs,
    )
    model.mixer = mixer  # type: ignore[assignment]  # the model says which mixer it is built with
    return model


default_cfgs = generate_default_cfgs(
    {
        "pdeformer_micro.untrained": default_cfg(
            input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0, first_conv="stem.conv1"
        ),
    }
)


@register_model
def pdeformer_micro(pretrained: bool = False, mixer: str = "heat", **kwargs: Any) -> PDEFormer:
    """PDEFormer-Micro (this library's CPU size): timm's MetaFormer with dims 32-64-128-256, depths 1-1-3-1, vHeat's
    convolutional stem (``stem="patch"`` for MetaFormer's), a linear head, and the token mixer ``mixer`` (default
    ``"heat"``; see :data:`MIXERS`). The spectral mixers hold 8 x 8 frequency embeddings (``fve_size``), the map's
    size at 32 px."""
    args: dict[str, Any] = dict(dims=32, depths=(1, 1, 3, 1), use_mlp_head=False)
    if mixer in ("heat", "wave"):
        args["fve_size"] = 8
    return _create_pdeformer("pdeformer_micro", pretrained, mixer, **dict(args, **kwargs))
