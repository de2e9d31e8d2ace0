"""WaveFormer: vision backbones with wave propagation (arXiv 2601.08602; the authors' code, github
ZishanShu/WaveFormer, ``WaveFormer/WaveFormer_dct.py``). The paper text is not at hand: this model follows the
authors' code, which is the vHeat authors' code with the Heat Conduction Operator replaced by a Wave Propagation
Operator (:class:`~pdevision.layers.WavePropagationOperator`): the same stem, stages, downsampling, blocks, head and
per-stage Frequency Value Embeddings (FVE), the heat decay replaced by the factor
``cos(c t) + (1 + alpha / 2) sin(c t) / c`` with ``t = GELU(Linear(FVE))`` (see :mod:`pdevision.ops.wave`).

:class:`WaveFormer` is :class:`~pdevision.models.vheat.VHeat` with that mixer: layout (NHWC stages), any input size
(FVE resampling), folding (``reparameterize``: the wave factors precomputed for one size), export and the timm API
are vHeat's.

Configurations: the authors' README names ``waveformer_{tiny,small,base}_224.yaml``, which are not in their
repository; their class default is depths 2-2-9-2, dims 96, post-norm, no layer scale, drop path 0.2. The
``waveformer_tiny`` / ``_small`` / ``_base`` registered here take vHeat's released T/S/B layouts; no weights exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from timm.models import generate_default_cfgs, register_model
from torch import nn

from pdevision.layers import WavePropagationOperator
from pdevision.models import vheat
from pdevision.models._staged import create_staged
from pdevision.models._weights import default_cfg, unwrap_state_dict
from pdevision.ops.dct import DctMethod

__all__ = ["WaveFormer", "checkpoint_filter_fn"]


class WaveFormer(vheat.VHeat):
    """WaveFormer backbone: vHeat's conv stem, four stages of wave-propagation blocks, LayerNorm, pooled linear head.

    Takes :class:`~pdevision.models.vheat.VHeat`'s arguments, whose defaults are also the authors' WaveFormer class
    defaults (depths 2-2-9-2, dims 96, post-norm, no layer scale, drop path 0.2), except ``k_mode``: the diffusivity
    ablation belongs to the heat operator.
    """

    #: the authors' initial FVE standard deviation (vHeat's: 0.02)
    fve_std: float = 0.015

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "k_mode" in kwargs:
            raise TypeError("WaveFormer takes no k_mode (the diffusivity of vHeat's heat operator)")
        super().__init__(*args, **kwargs)

    @staticmethod
    def mixer_factory(dct_method: DctMethod, k_mode: str) -> Callable[[int], nn.Module]:
        """``dim -> token mixer`` of every block: :class:`~pdevision.layers.WavePropagationOperator`."""
        return lambda dim: WavePropagationOperator(dim, dct_method=dct_method)


# -- checkpoints ------------------------------------------------------------------------------------

_AUTHOR_INFER_KEY = re.compile(r"^layers\.\d+\.\d+\.op\.k_exp$")


def checkpoint_filter_fn(state_dict: dict[str, Any], model: WaveFormer) -> dict[str, torch.Tensor]:
    """Convert a WaveFormer checkpoint to this model's layout.

    Accepts the authors' training layout (``patch_embed.*``, ``freq_embed.<i>``, ``layers.<i>.<j>.op.*`` with
    ``op.c`` and ``op.alpha``, ``classifier.*``; optionally inside ``model`` / ``model_ema`` / ``state_dict``, keys
    optionally prefixed ``module.``), mapped as vHeat's (:func:`pdevision.models.vheat.checkpoint_filter_fn`), and
    this library's own layout, folded (``k_exp``) or not.

    The authors' inference layout (after their ``infer_init``, holding ``op.k_exp``) is refused: their
    ``infer_init`` is vHeat's, left over, so its ``k_exp = exp(-w^2) ** to_k(FVE)`` is a heat decay, not the wave
    factor the model was trained with, and their inference forward still calls the ``to_k`` that ``infer_init``
    deleted, so it does not run at all.
    """
    flat = unwrap_state_dict(state_dict)
    if any(_AUTHOR_INFER_KEY.match(k) for k in flat):
        raise ValueError(
            "this is an inference checkpoint of the WaveFormer authors' code (layers.*.op.k_exp from their "
            "infer_init), which holds vHeat's heat decay exp(-w^2)**to_k(freq_embed), not the trained wave factor, "
            "and which their own code cannot run; load the training checkpoint (with freq_embed.* and "
            "layers.*.op.to_k.*) instead"
        )
    return vheat.checkpoint_filter_fn(flat, model)


# -- registry ------------------------------------------------------------------------------------


_NOTE = (
    "no weights; the WaveFormer configurations are not published in the authors' repository (their README names "
    "waveformer_{tiny,small,base}_224.yaml, which it does not contain): this is vHeat's released layout of the same "
    "size; the authors' class default is depths 2-2-9-2, dims 96, post-norm, drop path 0.2"
)

default_cfgs = generate_default_cfgs(
    {
        "waveformer_micro.untrained": default_cfg(
            input_size=(3, 64, 64),
            pool_size=(2, 2),
            crop_pct=1.0,
            paper_ids="arXiv:2601.08602",
            notes=("no weights; this library's CPU size, the layout of vheat_micro",),
        ),
        "waveformer_tiny.untrained": default_cfg(paper_ids="arXiv:2601.08602", notes=(_NOTE,)),
        "waveformer_small.untrained": default_cfg(paper_ids="arXiv:2601.08602", notes=(_NOTE,)),
        "waveformer_base.untrained": default_cfg(paper_ids="arXiv:2601.08602", notes=(_NOTE,)),
    }
)


@register_model
def waveformer_micro(pretrained: bool = False, **kwargs: Any) -> WaveFormer:
    """WaveFormer-Micro (this library's CPU-sized model, the layout of ``vheat_micro``): dims 32, depths 1-1-3-1,
    pre-norm, 64 px, drop path 0. No weights."""
    args = dict(img_size=64, dims=32, depths=(1, 1, 3, 1), post_norm=False, drop_path_rate=0.0)
    return create_staged(WaveFormer, "waveformer_micro", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def waveformer_tiny(pretrained: bool = False, **kwargs: Any) -> WaveFormer:
    """WaveFormer with vHeat-T's layout: dims 96, depths 2-2-6-2, pre-norm, drop path 0.1 (30.85M parameters + 2 per
    block). No weights. The authors' repository publishes no WaveFormer configuration (its README names
    ``waveformer_tiny_224.yaml``, which it does not contain); their class default is depths 2-2-9-2, dims 96,
    post-norm, no layer scale, drop path 0.2 (``WaveFormer()`` here)."""
    args = dict(dims=96, depths=(2, 2, 6, 2), post_norm=False, drop_path_rate=0.1)
    return create_staged(WaveFormer, "waveformer_tiny", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def waveformer_small(pretrained: bool = False, **kwargs: Any) -> WaveFormer:
    """WaveFormer with vHeat-S's layout: dims 96, depths 2-2-18-2, post-norm, layer scale 1e-5, drop path 0.3. No
    weights. The authors' repository publishes no WaveFormer configuration (see :func:`waveformer_tiny`)."""
    args = dict(dims=96, depths=(2, 2, 18, 2), post_norm=True, layer_scale=1e-5, drop_path_rate=0.3)
    return create_staged(WaveFormer, "waveformer_small", pretrained, checkpoint_filter_fn, **{**args, **kwargs})


@register_model
def waveformer_base(pretrained: bool = False, **kwargs: Any) -> WaveFormer:
    """WaveFormer with vHeat-B's layout: dims 128, depths 2-2-18-2, post-norm, layer scale 1e-5, drop path 0.5. No
    weights. The authors' repository publishes no WaveFormer configuration (see :func:`waveformer_tiny`)."""
    args = dict(dims=128, depths=(2, 2, 18, 2), post_norm=True, layer_scale=1e-5, drop_path_rate=0.5)
    return create_staged(WaveFormer, "waveformer_base", pretrained, checkpoint_filter_fn, **{**args, **kwargs})
