"""Parameter and multiply-accumulate counts.

MACs are counted with ``torch.utils.flop_counter`` (FLOPs / 2), the convention of fvcore and of the
papers' "GFLOPs" columns. Heat operators are counted on the DCT path they run: the matrix path is
seen by the counter as matrix products; the FFT path, which the counter does not see, is added by
formula (:func:`pdevision.ops.dct.tally_fft_flops`).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from pdevision.models.factory import fold_for_inference
from pdevision.ops.dct import force_method, tally_fft_flops


def count_params(model: nn.Module) -> int:
    """Number of parameters (buffers such as folded decay factors are not counted)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_macs(
    model: nn.Module,
    img_size: int | tuple[int, int] = 224,
    in_chans: int = 3,
    fold: bool = True,
    dct_method: str | None = None,
) -> int:
    """Multiply-accumulates of one eval-mode forward pass of a single ``img_size`` image.

    With ``fold`` (default) the count is of the inference form (``timm.utils.model.
    reparameterize_model`` on a copy, at ``img_size``), as the papers report: for vHeat the FVE
    projections are folded away. ``model`` itself is not modified. ``dct_method`` forces the heat
    operators' ``"auto"`` DCT to ``"matrix"`` or ``"fft"``; by default the path that runs is counted.
    """
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    target = fold_for_inference(model, (h, w)) if fold else model
    was_training = target.training
    target.eval()
    try:
        x = torch.zeros(1, in_chans, h, w, device=next(model.parameters()).device)
        forced = force_method(dct_method) if dct_method else contextlib.nullcontext()
        with forced, tally_fft_flops() as fft_flops, FlopCounterMode(display=False) as counter:
            target(x)
    finally:
        target.train(was_training)
    return int(counter.get_total_flops() + fft_flops[0]) // 2
