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

The flat family (``pdeformer_flat_*``) is the same class with one stage and ``stem="patchify"``: a patch embedding
of ``patch_size`` (2) to a fixed token grid (16 x 16 tokens at 32 px), every block at that resolution, then the
pooled linear head. Nothing between the blocks widens a token's reach, so a mixer's reach is the model's: at
32 px the ``"pointwise"`` arm sees one token, the local arms one more token a block, the spectral arms and attention
the whole grid (``benchmarks/pathfinder_flat``). The local controls of that family carry pointwise layers
(:class:`~pdevision.layers.mixers.PointwiseMixer`, :class:`~pdevision.layers.mixers.AvgPoolMixer`,
:class:`~pdevision.layers.mixers.DepthwiseMixer`), and each mixer's width options are set so that every arm's
parameters are within 5% of heat's, except heat's pass-through (``k_mode="fixed", k_init=0``), which is heat less
its diffusivity projection.

``init_seed`` shares the randomness of a comparison: with it, the mixers are drawn from their own generator
(seeded by ``init_seed`` alone) and every other weight from a generator of its own name, by MetaFormer's rule
(truncated normal of std 0.02, zero bias), so two models of one ``init_seed`` that differ only in the mixer start
from the same weights everywhere else; and building the model draws nothing from torch's global generator, so the
data order and augmentation of a run do not depend on the arm.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from timm.models import generate_default_cfgs, register_model
from timm.models.metaformer import (
    Attention,
    GroupNorm1NoBias,
    LayerNormNoBias,
    MetaFormer,
    Pooling,
    SepConv,
    Stem,
)
from torch import nn

from pdevision._values import is_int
from pdevision.layers import ConvStem
from pdevision.layers.mixers import (
    AvgPoolMixer,
    DepthwiseMixer,
    HcLMixer,
    HeatMixer,
    HyperbolicMixer,
    PointwiseMixer,
    WaveMixer,
)
from pdevision.models._arguments import check_rate
from pdevision.models._staged import create_staged
from pdevision.models._weights import default_cfg

__all__ = ["FLAT_ARMS", "MIXERS", "PDE_MIXERS", "STEMS", "PDEFormer", "flat_mixer_args", "mixer_kwargs"]

MIXERS: dict[str, type[nn.Module]] = {
    "heat": HeatMixer,
    "wave": WaveMixer,
    "hcl": HcLMixer,
    "hyperbolic": HyperbolicMixer,
    "identity": nn.Identity,
    "pooling": Pooling,
    "sepconv": SepConv,
    "attention": Attention,
    "pointwise": PointwiseMixer,
    "avgpool": AvgPoolMixer,
    "dwconv": DepthwiseMixer,
}
PDE_MIXERS: tuple[str, ...] = ("heat", "wave", "hcl", "hyperbolic")
STEMS: tuple[str, ...] = ("conv", "patch", "patchify")
# The arms of the flat family: name -> (mixer, its options beyond flat_mixer_args). "heat_pass" is heat with its
# filter a pass-through (k fixed at 0: the DCT and its inverse cancel), the control of "is the global filter used".
FLAT_ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "heat": ("heat", {}),
    "heat_pass": ("heat", {"k_mode": "fixed", "k_init": 0.0}),
    "wave": ("wave", {}),
    "hcl": ("hcl", {}),
    "hyperbolic": ("hyperbolic", {}),
    "attention": ("attention", {}),
    "pointwise": ("pointwise", {}),
    "avgpool": ("avgpool", {}),
    "dwconv": ("dwconv", {}),
}


class PDEFormer(MetaFormer):
    """timm's :class:`~timm.models.metaformer.MetaFormer` with its token mixer chosen by name (``mixer``, see
    :data:`MIXERS`), a choice of stem and, optionally, randomness shared across mixers (``init_seed``); every other
    argument is MetaFormer's.

    ``stem="conv"``: vHeat's two 3x3 stride-2 convolutions with LayerNorm and GELU (:class:`ConvStem`);
    ``stem="patch"``: MetaFormer's own 7x7 stride-4 convolution and norm. Both reduce by 4 and end at ``dims[0]``
    channels, so the stages, ``feature_info`` and the head do not change. ``stem="patchify"``: a ``patch_size`` x
    ``patch_size`` convolution of that stride (ViT's patch embedding) and MetaFormer's norm: each token sees its own
    patch only.

    ``init_seed``: see the module docstring; ``None`` (default) draws everything from torch's global generator, as
    timm does.
    """

    def __init__(
        self,
        *args: Any,
        mixer: str = "heat",
        stem: str = "conv",
        patch_size: int = 4,
        init_seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {list(STEMS)}, got {stem!r}")
        if not (is_int(patch_size) and 1 <= patch_size <= 64):
            raise ValueError(f"patch_size must be an integer from 1 to 64, got {patch_size!r}")
        if init_seed is not None and not (is_int(init_seed) and 0 <= init_seed < 2**63):
            raise ValueError(f"init_seed must be None or an integer >= 0, got {init_seed!r}")
        check_rate(kwargs.get("drop_path_rate", 0.0))  # MetaFormer's linspace took 1, -0.1 and NaN without a word
        kwargs = mixer_kwargs(mixer, kwargs)
        with _drawn_from(None if init_seed is None else _seed(init_seed, "token_mixer")):
            super().__init__(*args, token_mixers=MIXERS[mixer], **kwargs)
            self.stem = self._build_stem(stem, patch_size)
        self.mixer = mixer
        self.stem_type = stem
        self.patch_size = patch_size if stem == "patchify" else 4
        for i, info in enumerate(self.feature_info):
            info["reduction"] = self.patch_size * 2**i
        if init_seed is not None:
            self._share_init(init_seed)

    def _build_stem(self, stem: str, patch_size: int) -> nn.Module:
        conv = self.stem.conv
        place = dict(device=conv.weight.device, dtype=conv.weight.dtype)
        if stem == "conv":
            return ConvStem(self.in_chans, conv.out_channels).to(**place)
        if stem == "patchify":
            patchify = Stem(self.in_chans, conv.out_channels, norm_layer=type(self.stem.norm), **place)
            patchify.conv = nn.Conv2d(self.in_chans, conv.out_channels, patch_size, stride=patch_size, **place)
            self._init_weights(patchify.conv)
            return patchify
        return self.stem

    def _share_init(self, init_seed: int) -> None:
        """Every convolution and linear layer outside the token mixers drawn again by MetaFormer's rule (truncated
        normal of std 0.02, zero bias) from a generator seeded by ``init_seed`` and the layer's name; norms and
        scales start at their constants."""
        for name, module in self.named_modules():
            if "token_mixer" in name.split(".") or not isinstance(module, (nn.Conv2d, nn.Linear)):
                continue
            generator = torch.Generator().manual_seed(_seed(init_seed, name))
            with torch.no_grad():
                nn.init.trunc_normal_(module.weight, std=0.02, a=-2.0, b=2.0, generator=generator)
                if module.bias is not None:
                    module.bias.zero_()


def _seed(init_seed: int, name: str) -> int:
    """A 63-bit seed for the generator of ``name`` under ``init_seed``."""
    digest = hashlib.blake2b(f"{init_seed}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@contextlib.contextmanager
def _drawn_from(seed: int | None) -> Iterator[None]:
    """Torch's global CPU generator seeded with ``seed`` inside, and restored after (nothing changes when ``None``)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


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


def flat_mixer_args(mixer: str, dim: int) -> dict[str, Any]:
    """The width options of ``mixer`` in a flat model of ``dim`` channels that put its parameters within 5% of the
    heat arm's (``tests/models/test_pdeformer.py``): spectral mixers with a 4 x 4 FVE (resampled to the token grid),
    HcNet's heat step on ``5/4 dim`` channels, PDE-ResNet's step at expansion 2 (4 in its paper's blocks)."""
    if mixer in ("heat", "wave"):
        return {"fve_size": 4}
    if mixer == "hcl":
        return {"hcl_hidden": dim * 5 // 4}
    if mixer == "hyperbolic":
        return {"expansion": 2}
    return {}


def _create_pdeformer(variant: str, pretrained: bool = False, mixer: str = "heat", **kwargs: Any) -> PDEFormer:
    """The arguments MetaFormer cannot check itself (the mixer's name, per-stage widths, attention's heads), then the
    staged families' one factory (``features_only`` through ``forward_intermediates``, as theirs)."""
    mixer_kwargs(mixer, {})  # an unknown mixer is refused before anything else
    depths = kwargs.get("depths", (1, 1, 3, 1))
    if not isinstance(depths, list | tuple):  # MetaFormer's len() of it: "does not take the arguments ['depths']"
        raise ValueError(f"depths must be a list of block counts, one per stage (such as (6,)), got {depths!r:.80}")
    kwargs.setdefault("out_indices", tuple(range(len(depths))))  # the flat family has one stage
    kwargs["dims"] = dims = _stage_dims(kwargs.get("dims", 32), depths)
    if mixer == "attention":  # timm's Attention maps back to the stage's width: heads must tile it
        head_dim = kwargs.setdefault("head_dim", min(32, dims[0]))
        if not isinstance(head_dim, int) or head_dim < 1 or any(d % head_dim for d in dims):
            raise ValueError(f"attention needs widths that are multiples of head_dim={head_dim!r}, got dims {dims}")
    return create_staged(PDEFormer, variant, pretrained, mixer=mixer, **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "pdeformer_micro.untrained": default_cfg(
            input_size=(3, 64, 64), pool_size=(2, 2), crop_pct=1.0, first_conv="stem.conv1"
        ),
        "pdeformer_flat_micro.untrained": default_cfg(
            input_size=(3, 32, 32), pool_size=(16, 16), crop_pct=1.0, first_conv="stem.conv"
        ),
        "pdeformer_flat_small.untrained": default_cfg(
            input_size=(3, 32, 32), pool_size=(16, 16), crop_pct=1.0, first_conv="stem.conv"
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


def _flat(variant: str, dim: int, pretrained: bool, mixer: str, kwargs: dict[str, Any]) -> PDEFormer:
    args: dict[str, Any] = dict(dims=(dim,), depths=(6,), stem="patchify", patch_size=2, use_mlp_head=False)
    args.update(flat_mixer_args(mixer, dim) if mixer in MIXERS else {})
    return _create_pdeformer(variant, pretrained, mixer, **dict(args, **kwargs))


@register_model
def pdeformer_flat_micro(pretrained: bool = False, mixer: str = "heat", **kwargs: Any) -> PDEFormer:
    """PDEFormer-Flat-Micro: one stage of 6 MetaFormer blocks of 64 channels on 2 x 2 patches (16 x 16 tokens at
    32 px), no downsampling, a pooled linear head; the token mixer ``mixer`` with the widths of
    :func:`flat_mixer_args`."""
    return _flat("pdeformer_flat_micro", 64, pretrained, mixer, kwargs)


@register_model
def pdeformer_flat_small(pretrained: bool = False, mixer: str = "heat", **kwargs: Any) -> PDEFormer:
    """PDEFormer-Flat-Small: :func:`pdeformer_flat_micro` at 128 channels."""
    return _flat("pdeformer_flat_small", 128, pretrained, mixer, kwargs)
